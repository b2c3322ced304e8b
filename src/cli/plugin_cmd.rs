//! `poolwright plugin check URL` (the conformance kit) and
//! `poolwright plugin openapi` (the published contract).

use crate::spec::values::InvalidValue;
use std::path::PathBuf;
use std::time::Duration;

use super::{Output, exit, parse_duration};
use crate::model::NodeTemplate;
use crate::provider::http::{Http, check, openapi};
use crate::spec::located::At;
use crate::spec::types::HttpProvider;

#[derive(Debug, clap::Subcommand)]
pub enum PluginCommand {
    /// Run the conformance battery against a live plug-in
    ///
    /// Creates pools named PREFIX-a and PREFIX-b, exercises every call of the
    /// contract (idempotency keys, problem details, the chosen node and only
    /// it...), deletes them, and prints a pass/fail table.
    /// Exit status: 0 when every check passed, 1 otherwise.
    Check(Box<CheckArgs>),
    /// Print the plug-in protocol as OpenAPI 3.1 (YAML)
    Openapi,
}

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The plug-in's base URL
    url: String,
    /// Prefix of the pools the check creates (and deletes)
    #[arg(long, default_value = "pwcheck", value_parser = parse_prefix)]
    prefix: String,
    /// Template the check's pools start on (JSON, as in describe answers)
    #[arg(long, default_value = r#"{"image":"pwcheck-image-1"}"#, value_parser = parse_template)]
    template: NodeTemplate,
    /// Template the template-change check moves to (JSON)
    #[arg(long, default_value = r#"{"image":"pwcheck-image-2"}"#, value_parser = parse_template)]
    new_template: NodeTemplate,
    /// How long nodes may take to appear, become healthy or go
    #[arg(long, default_value = "5m", value_parser = parse_duration, value_name = "DURATION")]
    timeout: Duration,
    /// Bearer token file (as the provider document's tokenFile)
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Environment variable holding the bearer token
    #[arg(long, value_name = "NAME", conflicts_with = "token_file")]
    token_env: Option<String>,
    /// CA bundle that signs the plug-in's certificate
    #[arg(long, value_name = "FILE")]
    ca_file: Option<PathBuf>,
    /// Client certificate for mutual TLS
    #[arg(long, value_name = "FILE", requires = "client_key")]
    client_cert: Option<PathBuf>,
    /// Client certificate's key
    #[arg(long, value_name = "FILE", requires = "client_cert")]
    client_key: Option<PathBuf>,
    /// A pool size the plug-in must refuse with 403 quota-exceeded (its quota
    /// is not visible from outside; without this the quota check is skipped).
    /// It is sent for real: a plug-in that accepts it launches the nodes, and
    /// the check sets the size back at once
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    quota_size: Option<u32>,
    /// An image channel the plug-in serves: its `GET /v1/channels/NAME/images` is checked too
    #[arg(long, value_name = "NAME")]
    channel: Option<String>,
    /// Per-request timeout
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    request_timeout: Duration,
    /// Output format
    #[arg(long, short, value_enum, default_value_t = Output::Text)]
    output: Output,
}

fn parse_prefix(s: &str) -> Result<String, InvalidValue> {
    if crate::spec::validate::is_dns_label(s, 40) {
        Ok(s.to_string())
    } else {
        Err(InvalidValue("1 to 40 lower-case letters, digits and '-', starting and ending with a letter or digit".into()))
    }
}

fn parse_template(s: &str) -> Result<NodeTemplate, InvalidValue> {
    serde_json::from_str(s).map_err(|e| InvalidValue(format!("not a node template (JSON): {e}")))
}

pub(super) fn plugin(cmd: PluginCommand) -> anyhow::Result<u8> {
    match cmd {
        PluginCommand::Openapi => {
            print!("{}", openapi::document_text());
            Ok(exit::OK)
        }
        PluginCommand::Check(args) => check_cmd(*args),
    }
}

fn check_cmd(args: CheckArgs) -> anyhow::Result<u8> {
    let mut settings = HttpProvider::at(&args.url);
    // A conformance run is aimed at a plug-in on purpose: no loopback rule.
    settings.allow_insecure = At::bare(true);
    settings.token_file = args.token_file.map(At::bare);
    settings.token_env = args.token_env.map(At::bare);
    settings.ca_file = args.ca_file.map(At::bare);
    settings.client_cert = args.client_cert.map(At::bare);
    settings.client_key = args.client_key.map(At::bare);
    settings.timeout = At::bare(crate::spec::values::Duration(args.request_timeout));
    let has_token = settings.token_file.is_some() || settings.token_env.is_some();
    let http = Http::new("plugin-check", &settings, std::path::Path::new("."))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let opts = check::Options {
        prefix: args.prefix,
        template: args.template,
        new_template: args.new_template,
        timeout: args.timeout,
        has_token,
        quota_size: args.quota_size,
        channel: args.channel.clone(),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let report = rt.block_on(check::run(&http, &opts));
    match args.output {
        Output::Text => print!("{}", report.render()),
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    Ok(if report.ok() { exit::OK } else { exit::FAILED })
}
