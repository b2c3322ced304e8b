//! A real AWS API for tests: `moto_server` (PyPI `moto[server]`) on 127.0.0.1 on
//! a free port, one per test process, reset before each test. Tests that use it
//! run one at a time (they share the server). If moto cannot start, the test
//! fails with the reason; nothing is skipped.
#![allow(dead_code)]

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_credential_types::Credentials;

pub const REGION: &str = "us-east-1";
pub const ZONE: &str = "us-east-1a";

pub struct Moto {
    pub url: String,
}

static SERVER: OnceLock<Result<Moto, String>> = OnceLock::new();
static SERIAL: Mutex<()> = Mutex::new(());

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The moto executable: `$POOLWRIGHT_MOTO_SERVER`, else `moto_server` on PATH.
fn executable() -> String {
    std::env::var("POOLWRIGHT_MOTO_SERVER").unwrap_or_else(|_| "moto_server".into())
}

fn start() -> Result<Moto, String> {
    let port = free_port();
    let exe = executable();
    // A watchdog shell stops moto when this test process exits, however it exits.
    let script = format!(
        "{exe} -H 127.0.0.1 -p {port} >/dev/null 2>&1 & m=$!; \
         while kill -0 {parent} 2>/dev/null && kill -0 $m 2>/dev/null; do sleep 0.5; done; kill $m 2>/dev/null",
        parent = std::process::id()
    );
    Command::new("sh")
        .arg("-c")
        .arg(&script)
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start sh for {exe}: {e}"))?;
    let url = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(Moto { url });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!(
        "{exe} did not listen on 127.0.0.1:{port} within 60 s. Install it with \
         `python3 -m pip install 'moto[server]'` (scripts/test.sh does) or point \
         POOLWRIGHT_MOTO_SERVER at it"
    ))
}

/// The shared moto server, reset, held for this test alone.
pub struct MotoGuard {
    pub url: String,
    _serial: MutexGuard<'static, ()>,
}

pub fn moto() -> MotoGuard {
    let serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let server = match SERVER.get_or_init(start) {
        Ok(m) => m,
        Err(e) => panic!("moto is required for the AWS tests and could not start: {e}"),
    };
    reset(&server.url);
    MotoGuard {
        url: server.url.clone(),
        _serial: serial,
    }
}

fn reset(url: &str) {
    use std::io::{Read, Write};
    let addr = url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).expect("moto answers");
    write!(
        stream,
        "POST /moto-api/reset HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/1.0 200"),
        "moto reset failed: {answer}"
    );
}

/// Environment for a `poolwright` process talking to moto: dummy credentials
/// through the standard chain, as a user's would come.
pub const ENV: &[(&str, &str)] = &[
    ("AWS_ACCESS_KEY_ID", "testing"),
    ("AWS_SECRET_ACCESS_KEY", "testing"),
    ("AWS_SESSION_TOKEN", "testing"),
    ("AWS_EC2_METADATA_DISABLED", "true"),
    ("AWS_CONFIG_FILE", "/dev/null"),
    ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null"),
];

pub fn sdk_config(url: &str) -> SdkConfig {
    SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(REGION))
        .endpoint_url(url)
        .credentials_provider(
            aws_credential_types::provider::SharedCredentialsProvider::new(Credentials::new(
                "testing", "testing", None, None, "tests",
            )),
        )
        .build()
}

/// The test's own view of moto, to seed and to check what poolwright did.
pub struct Aws {
    pub asg: aws_sdk_autoscaling::Client,
    pub ec2: aws_sdk_ec2::Client,
    pub ssm: aws_sdk_ssm::Client,
    rt: tokio::runtime::Runtime,
}

#[derive(Debug, Clone)]
pub struct GroupState {
    pub desired: i32,
    pub min: i32,
    pub max: i32,
    pub instances: Vec<String>,
    pub tags: Vec<(String, String)>,
    pub launch_template_version: Option<String>,
    pub unprotected: usize,
}

impl Aws {
    pub fn new(url: &str) -> Aws {
        let config = sdk_config(url);
        Aws {
            asg: aws_sdk_autoscaling::Client::new(&config),
            ec2: aws_sdk_ec2::Client::new(&config),
            ssm: aws_sdk_ssm::Client::new(&config),
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
        }
    }

    pub fn block<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// A launch template `name` with versions 1..=versions on moto's first AMI.
    pub fn seed_launch_template(&self, name: &str, versions: u32) {
        self.block(async {
            let images = self.ec2.describe_images().send().await.unwrap();
            let ami = images.images()[0].image_id().unwrap().to_string();
            let data = |ty: &str| {
                aws_sdk_ec2::types::RequestLaunchTemplateData::builder()
                    .image_id(&ami)
                    .instance_type(ty.into())
                    .build()
            };
            self.ec2
                .create_launch_template()
                .launch_template_name(name)
                .launch_template_data(data("t3.micro"))
                .send()
                .await
                .unwrap();
            for _ in 1..versions {
                self.ec2
                    .create_launch_template_version()
                    .launch_template_name(name)
                    .launch_template_data(data("t3.small"))
                    .send()
                    .await
                    .unwrap();
            }
        })
    }

    /// The AMIs moto starts with (their ids), in its order.
    pub fn images(&self) -> Vec<String> {
        self.block(async {
            let out = self.ec2.describe_images().send().await.unwrap();
            out.images()
                .iter()
                .filter_map(|i| i.image_id().map(str::to_string))
                .collect()
        })
    }

    /// A new AMI, created now.
    pub fn register_image(&self, name: &str) -> String {
        self.block(async {
            let out = self
                .ec2
                .register_image()
                .name(name)
                .root_device_name("/dev/xvda")
                .send()
                .await
                .unwrap();
            out.image_id().unwrap().to_string()
        })
    }

    pub fn put_parameter(&self, name: &str, value: &str) {
        self.block(async {
            self.ssm
                .put_parameter()
                .name(name)
                .value(value)
                .r#type(aws_sdk_ssm::types::ParameterType::String)
                .overwrite(true)
                .send()
                .await
                .unwrap();
        })
    }

    /// Each version of a launch template: number, description, image.
    pub fn lt_versions(&self, name: &str) -> Vec<(i64, String, String)> {
        self.block(async {
            let out = self
                .ec2
                .describe_launch_template_versions()
                .launch_template_name(name)
                .send()
                .await
                .unwrap();
            let mut v: Vec<(i64, String, String)> = out
                .launch_template_versions()
                .iter()
                .map(|v| {
                    (
                        v.version_number().unwrap_or(0),
                        v.version_description().unwrap_or("").to_string(),
                        v.launch_template_data()
                            .and_then(|d| d.image_id())
                            .unwrap_or("")
                            .to_string(),
                    )
                })
                .collect();
            v.sort();
            v
        })
    }

    pub fn group(&self, name: &str) -> Option<GroupState> {
        self.block(async {
            let out = self
                .asg
                .describe_auto_scaling_groups()
                .auto_scaling_group_names(name)
                .send()
                .await
                .unwrap();
            let g = out.auto_scaling_groups().first()?;
            Some(GroupState {
                desired: g.desired_capacity().unwrap_or(0),
                min: g.min_size().unwrap_or(0),
                max: g.max_size().unwrap_or(0),
                instances: g
                    .instances()
                    .iter()
                    .map(|i| i.instance_id().unwrap().to_string())
                    .collect(),
                tags: g
                    .tags()
                    .iter()
                    .map(|t| {
                        (
                            t.key().unwrap_or("").to_string(),
                            t.value().unwrap_or("").to_string(),
                        )
                    })
                    .collect(),
                launch_template_version: g
                    .launch_template()
                    .and_then(|l| l.version())
                    .or_else(|| {
                        g.mixed_instances_policy()
                            .and_then(|m| m.launch_template())
                            .and_then(|l| l.launch_template_specification())
                            .and_then(|s| s.version())
                    })
                    .map(str::to_string),
                unprotected: g
                    .instances()
                    .iter()
                    .filter(|i| i.protected_from_scale_in() != Some(true))
                    .count(),
            })
        })
    }

    /// The `poolwright.io/template` tag of each instance.
    pub fn instance_templates(&self, ids: &[String]) -> Vec<Option<String>> {
        if ids.is_empty() {
            return Vec::new();
        }
        self.block(async {
            let out = self
                .ec2
                .describe_instances()
                .set_instance_ids(Some(ids.to_vec()))
                .send()
                .await
                .unwrap();
            let mut by_id = std::collections::HashMap::new();
            for r in out.reservations() {
                for i in r.instances() {
                    let tag = i
                        .tags()
                        .iter()
                        .find(|t| t.key() == Some("poolwright.io/template"))
                        .and_then(|t| t.value())
                        .map(str::to_string);
                    by_id.insert(i.instance_id().unwrap().to_string(), tag);
                }
            }
            ids.iter()
                .map(|id| by_id.get(id).cloned().flatten())
                .collect()
        })
    }

    /// Every instance ever launched with tag `key=value`, terminated ones
    /// included (moto keeps them): (id, state).
    pub fn instances_tagged(&self, key: &str, value: &str) -> Vec<(String, String)> {
        self.block(async {
            let out = self
                .ec2
                .describe_instances()
                .filters(
                    aws_sdk_ec2::types::Filter::builder()
                        .name(format!("tag:{key}"))
                        .values(value)
                        .build(),
                )
                .send()
                .await
                .unwrap();
            out.reservations()
                .iter()
                .flat_map(|r| r.instances())
                .map(|i| {
                    (
                        i.instance_id().unwrap_or_default().to_string(),
                        i.state()
                            .and_then(|s| s.name())
                            .map(|n| n.as_str().to_string())
                            .unwrap_or_default(),
                    )
                })
                .collect()
        })
    }

    /// Every instance of a pool of the ec2-instances plug-in, terminated ones
    /// included (moto keeps them): (id, state, `poolwright.io/template` tag).
    pub fn pool_instances(&self, pool: &str) -> Vec<(String, String, Option<String>)> {
        self.block(async {
            let out = self
                .ec2
                .describe_instances()
                .filters(
                    aws_sdk_ec2::types::Filter::builder()
                        .name("tag:poolwright.io/pool")
                        .values(pool)
                        .build(),
                )
                .send()
                .await
                .unwrap();
            out.reservations()
                .iter()
                .flat_map(|r| r.instances())
                .map(|i| {
                    let tag = i
                        .tags()
                        .iter()
                        .find(|t| t.key() == Some("poolwright.io/template"))
                        .and_then(|t| t.value())
                        .map(str::to_string);
                    (
                        i.instance_id().unwrap_or_default().to_string(),
                        i.state()
                            .and_then(|s| s.name())
                            .map(|n| n.as_str().to_string())
                            .unwrap_or_default(),
                        tag,
                    )
                })
                .collect()
        })
    }

    /// A group made outside poolwright (no tags of ours).
    pub fn create_foreign_group(&self, name: &str, lt: &str, size: i32) {
        self.block(async {
            self.asg
                .create_auto_scaling_group()
                .auto_scaling_group_name(name)
                .min_size(0)
                .max_size(size)
                .desired_capacity(size)
                .availability_zones(ZONE)
                .launch_template(
                    aws_sdk_autoscaling::types::LaunchTemplateSpecification::builder()
                        .launch_template_name(lt)
                        .version("1")
                        .build(),
                )
                .send()
                .await
                .unwrap();
        })
    }

    pub fn set_desired(&self, name: &str, n: i32) {
        self.block(async {
            self.asg
                .update_auto_scaling_group()
                .auto_scaling_group_name(name)
                .max_size(n.max(10))
                .desired_capacity(n)
                .send()
                .await
                .unwrap();
        })
    }
}
