//! The published contract: an OpenAPI 3.1 document whose schemas are
//! generated from the wire types and whose paths are written here, next to
//! the code that calls them. `poolwright plugin openapi` prints it;
//! `schemas/provider-plugin.openapi.yaml` is that output, and a test fails
//! when the two differ.

use schemars::generate::SchemaSettings;
use serde_json::{Value, json};

use super::wire;

fn schema_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn json_body(name: &str) -> Value {
    json!({"required": true, "content": {"application/json": {"schema": schema_ref(name)}}})
}

fn ok(name: &str, description: &str) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": schema_ref(name)}}})
}

/// The answers every call may give besides success.
fn problems(extra: &[(&str, &str)]) -> serde_json::Map<String, Value> {
    let mut out = serde_json::Map::new();
    for (code, why) in extra {
        out.insert(
            code.to_string(),
            json!({"$ref": format!("#/components/responses/{why}")}),
        );
    }
    out.insert(
        "400".into(),
        json!({"$ref": "#/components/responses/Invalid"}),
    );
    out.insert(
        "401".into(),
        json!({"$ref": "#/components/responses/Unauthorized"}),
    );
    out.insert(
        "422".into(),
        json!({"$ref": "#/components/responses/Invalid"}),
    );
    out.insert(
        "429".into(),
        json!({"$ref": "#/components/responses/Throttled"}),
    );
    out.insert(
        "503".into(),
        json!({"$ref": "#/components/responses/Unavailable"}),
    );
    out
}

fn operation(
    id: &str,
    summary: &str,
    description: &str,
    params: &[&str],
    body: Option<&str>,
    success: (&str, Value),
    extra: &[(&str, &str)],
) -> Value {
    let mut responses = problems(extra);
    responses.insert(success.0.to_string(), success.1);
    let mut op = json!({
        "operationId": id,
        "summary": summary,
        "description": description,
        "parameters": params.iter().map(|p| json!({"$ref": format!("#/components/parameters/{p}")})).collect::<Vec<_>>(),
        "responses": responses,
    });
    if let Some(b) = body {
        op["requestBody"] = json_body(b);
    }
    op
}

const MUTATING: &str = "Carries an Idempotency-Key: a request repeated with the same key (a retry after a lost answer, a resume after a crash) must act once and answer as the first did.";

/// The whole document, as a JSON value.
pub fn document() -> Value {
    let mut generator = SchemaSettings::draft2020_12()
        .with(|s| s.definitions_path = "/components/schemas".into())
        .into_generator();
    macro_rules! register {
        ($($t:ty),* $(,)?) => {{ $( let _ = generator.subschema_for::<$t>(); )* }};
    }
    register!(
        wire::Capabilities,
        wire::DescribeRequest,
        wire::DescribeResponse,
        wire::CreatePoolRequest,
        wire::SetSizeRequest,
        wire::SetTemplateRequest,
        wire::CreateNodesRequest,
        wire::CreateNodesResponse,
        wire::TerminateNodeRequest,
        wire::ReimageNodeRequest,
        wire::AdoptPoolRequest,
        wire::SetBoundsRequest,
        crate::model::InPlace,
        wire::Ack,
        wire::Problem,
        wire::ChannelImages,
    );
    let schemas: serde_json::Map<String, Value> =
        generator.take_definitions(true).into_iter().collect();
    let problem_types: Vec<String> = wire::ProblemType::ALL.iter().map(|t| t.uri()).collect();
    let mutating = |id: &str,
                    summary: &str,
                    desc: &str,
                    params: &[&str],
                    body: Option<&str>,
                    success: (&str, Value),
                    extra: &[(&str, &str)]| {
        let mut all = params.to_vec();
        all.push("IdempotencyKey");
        let mut extra = extra.to_vec();
        if !extra.iter().any(|(code, _)| *code == "409") {
            extra.push(("409", "Conflict"));
        }
        operation(
            id,
            summary,
            &format!("{desc} {MUTATING}"),
            &all,
            body,
            success,
            &extra,
        )
    };
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "poolwright provider plug-in protocol",
            "version": "1",
            "summary": "What a plug-in serves so that poolwright can manage its node pools (protocol poolwright.io/plugin/v1).",
            "description": "A plug-in owns node pools on some platform and offers small primitives; poolwright's one rollout executor does every replacement through them. Rules every plug-in follows:\n\n- Every mutating request carries `Idempotency-Key`. The plug-in records the key durably with the answer of a request that acted; the same key again acts once and returns the recorded answer. A request still in progress under the same key is answered 409 `conflict` with `Retry-After` (poolwright waits and asks again). The same key with a different body is answered 422 `invalid`. A refusal that acted on nothing (403, 404, 409 without Retry-After) need not be recorded.\n- Capacity is absolute: set size to N, create `count` nodes so that the pool holds `size`.\n- Reads reflect every change answered with 2xx (read-your-writes): poolwright decides its next step from `POST /v1/describe`.\n- A node is `healthy` only when it can take work (for Kubernetes nodes: the machine runs and its kubelet could register); poolwright additionally gates on Kubernetes Ready when the pool has a cluster.\n- Problems are RFC 9457 `application/problem+json` with a `type` of the form `urn:poolwright:problem:TYPE`. `quota-exceeded` makes poolwright fall back to terminate-before-create (or wait); `throttled` (429) and `unavailable` (503) are retried with backoff honouring `Retry-After`; other 4xx are not retried.\n- Requests carry `Authorization: Bearer TOKEN` when the provider document names a token; a plug-in that needs one answers 401 without it.\n\nCheck a plug-in with `poolwright plugin check URL`.",
            "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"}
        },
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "servers": [{"url": "{base}", "variables": {"base": {"default": "http://127.0.0.1:9480", "description": "The provider document's `url`."}}}],
        "security": [{"bearer": []}, {}],
        "paths": {
            "/v1/capabilities": {"get": operation(
                "getCapabilities", "What the plug-in is and can do",
                "Asked before the first call and again every few minutes.",
                &[], None, ("200", ok("Capabilities", "The capabilities")), &[])},
            "/v1/channels/{channel}/images": {"get": operation(
                "channelImages", "The images an image channel offers",
                "Only for plug-ins named as the source of an `ImageChannel` (`source: {http: {provider: NAME}}`): every image the channel has published, each with its release time. poolwright picks the newest that is old enough (`minReleaseAge`), not denied and not recalled; it asks once per channel every `interval`. A channel the plug-in does not know is answered 404 `not-found`. Safe to repeat (it reads only; no Idempotency-Key).",
                &["Channel"], None, ("200", ok("ChannelImages", "The channel's images")), &[("404", "NotFound")])},
            "/v1/describe": {"post": operation(
                "describePools", "Describe many pools in one call",
                "Pools that do not exist are absent from the answer; pools that were not asked for must not appear. A request naming more pools than `describeBatchSize` is answered 400 or 422 `invalid` (poolwright never sends one). Safe to repeat (it reads only; no Idempotency-Key).",
                &[], Some("DescribeRequest"), ("200", ok("DescribeResponse", "The pools that exist")), &[("400", "Invalid")])},
            "/v1/pools": {"post": mutating(
                "createPool", "Create (or adopt the name of) a pool",
                "Create the pool at `pool.size` nodes on `pool.template`, each node stamped with `templateHash`. Answers 409 `conflict` when a pool of that name exists and was not created under this key.",
                &[], Some("CreatePoolRequest"), ("201", ok("Ack", "Created")), &[("409", "Conflict"), ("403", "QuotaExceeded")])},
            "/v1/pools/{pool}": {"delete": mutating(
                "deletePool", "Delete a pool and its nodes",
                "Deleting a pool that does not exist answers 404 `not-found`. The pool may stay in describe answers while its nodes terminate (they report `terminating`), or leave them at once: poolwright forgets the pool when the delete is answered and does not ask about it again.",
                &["Pool"], None, ("200", ok("Ack", "Deleted (nodes may still be terminating)")), &[("404", "NotFound")])},
            "/v1/pools/{pool}/adopt": {"post": mutating(
                "adoptPool", "Start managing a pool that exists but was not created by poolwright",
                "Mark it as managed (for example with a tag) so later calls may act on it. The body is `AdoptPoolRequest`, an empty object today: ignore fields you do not know. Adopting a pool that is already managed succeeds.",
                &["Pool"], Some("AdoptPoolRequest"), ("200", ok("Ack", "Adopted")), &[("404", "NotFound")])},
            "/v1/pools/{pool}/size": {"put": mutating(
                "setSize", "Hold exactly `size` nodes",
                "Absolute. Growing launches nodes on the current template; shrinking lets the plug-in choose which nodes go (poolwright terminates chosen nodes itself when it matters).",
                &["Pool"], Some("SetSizeRequest"), ("200", ok("Ack", "Set")), &[("404", "NotFound"), ("403", "QuotaExceeded")])},
            "/v1/pools/{pool}/template": {"put": mutating(
                "setTemplate", "Set the template future nodes launch with",
                "Running nodes are not touched and keep their template hash. The template is stored and returned by describe verbatim.",
                &["Pool"], Some("SetTemplateRequest"), ("200", ok("Ack", "Set")), &[("404", "NotFound")])},
            "/v1/pools/{pool}/bounds": {"put": mutating(
                "setBounds", "Set or clear the autoscaler bounds",
                "",
                &["Pool"], Some("SetBoundsRequest"), ("200", ok("Ack", "Set")), &[("404", "NotFound")])},
            "/v1/pools/{pool}/attributes": {"put": mutating(
                "updateInPlace", "Apply labels, annotations, taints and tags in place",
                "To the pool and its running nodes, without replacing any node. The whole set is given: attributes absent from the request are removed.",
                &["Pool"], Some("InPlace"), ("200", ok("Ack", "Applied")), &[("404", "NotFound")])},
            "/v1/pools/{pool}/nodes": {"post": mutating(
                "createNodes", "Launch nodes on the current template",
                "Launch `count` nodes so that the pool holds `size`. May answer 409 `conflict` when the pool's size is not `size - count`, and 403 `quota-exceeded` when the platform refuses the capacity (then nothing is launched).",
                &["Pool"], Some("CreateNodesRequest"), ("200", ok("CreateNodesResponse", "The ids of the launched nodes")), &[("404", "NotFound"), ("403", "QuotaExceeded"), ("409", "Conflict")])},
            "/v1/pools/{pool}/nodes/{node}/terminate": {"post": mutating(
                "terminateNode", "Terminate the chosen node (and only it)",
                "With `decrement`, the pool's size drops by one; without, a replacement is launched on the current template. A node already terminating is not an error.",
                &["Pool", "Node"], Some("TerminateNodeRequest"), ("200", ok("Ack", "Terminating")), &[("404", "NotFound")])},
            "/v1/pools/{pool}/nodes/{node}/reimage": {"post": mutating(
                "reimageNode", "Rebuild the node in place onto the current template",
                "Only when the capabilities say `reimage: true` (otherwise 501 `unsupported`). The node keeps its id. While it rebuilds it reports `state: pending`, with the old or the new `templateHash` (either is fine); once done it reports the request's `templateHash` and `healthy` when it can take work. A node that reports neither (still in its old state on the old hash) tells poolwright the request never arrived: it is sent again under the same Idempotency-Key.",
                &["Pool", "Node"], Some("ReimageNodeRequest"), ("200", ok("Ack", "Reimaging")), &[("404", "NotFound"), ("501", "Unsupported")])},
        },
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "From the provider document's tokenFile or tokenEnv."}},
            "parameters": {
                "Channel": {"name": "channel", "in": "path", "required": true, "description": "An ImageChannel's name: an RFC 1123 label.", "schema": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63}},
                "Pool": {"name": "pool", "in": "path", "required": true, "description": "A pool name: an RFC 1123 label.", "schema": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63}},
                "Node": {"name": "node", "in": "path", "required": true, "description": "A node id as describe reported it: 1 to 253 printable ASCII characters, no `/`, not `.` or `..`. poolwright percent-encodes it as a URL path segment (RFC 3986): exactly `\"`, `#`, `%`, `<`, `>`, `?`, `\\`, `` ` ``, `{` and `}` are encoded; every other character, `+ & = ; , : @ ! $ ' ( ) * [ ] ^ |` and `~` among them, arrives as it is. Percent-decode the segment; never read `+` as a space.", "schema": {"type": "string", "minLength": 1, "maxLength": 253}},
                "IdempotencyKey": {"name": "Idempotency-Key", "in": "header", "required": true, "description": "Names the intent: a UUID (RFC 9562 version 8) that poolwright derives from its journal, so a retry or a resume repeats it. Record it durably with the answer; it may be passed on to a platform that takes UUID request ids.", "schema": {"type": "string", "minLength": 1, "maxLength": 255}}
            },
            "responses": {
                "Invalid": problem_response("The request is malformed or not allowed (`invalid`); not retried."),
                "Unauthorized": problem_response("A bearer token is required, or the one sent is not valid (`unauthorized`)."),
                "NotFound": problem_response("The pool or node does not exist (`not-found`)."),
                "Conflict": problem_response("The request conflicts with the pool's state (`conflict`; not retried), or, with `Retry-After`, a request with the same Idempotency-Key is still in progress (poolwright waits and asks again)."),
                "QuotaExceeded": problem_response("The platform refused the capacity (`quota-exceeded`): poolwright falls back to terminate-before-create, or waits."),
                "Throttled": problem_response("Rate limited (`throttled`); retried with backoff, after `Retry-After` when given."),
                "Unavailable": problem_response("Temporarily unavailable (`unavailable`); retried with backoff, after `Retry-After` when given."),
                "Unsupported": problem_response("The plug-in does not offer this call (`unsupported`).")
            }
        },
        "x-problem-types": problem_types,
    })
}

fn problem_response(description: &str) -> Value {
    json!({
        "description": description,
        "headers": {"Retry-After": {"description": "Seconds, or an HTTP date, to wait before retrying: on 429 and 503, and on a 409 whose request under the same Idempotency-Key is still in progress (poolwright waits and asks again; a 409 without it is not retried).", "schema": {"type": "string"}}},
        "content": {"application/problem+json": {"schema": schema_ref("Problem")}}
    })
}

/// The top level in the order readers expect (`openapi` first); nested maps
/// are sorted, which keeps the generated file stable.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Ordered<'a> {
    openapi: &'a Value,
    info: &'a Value,
    json_schema_dialect: &'a Value,
    servers: &'a Value,
    security: &'a Value,
    paths: &'a Value,
    components: &'a Value,
    #[serde(rename = "x-problem-types")]
    problem_types: &'a Value,
}

/// The document as the checked-in file holds it (YAML).
pub fn document_text() -> String {
    let doc = document();
    let ordered = Ordered {
        openapi: &doc["openapi"],
        info: &doc["info"],
        json_schema_dialect: &doc["jsonSchemaDialect"],
        servers: &doc["servers"],
        security: &doc["security"],
        paths: &doc["paths"],
        components: &doc["components"],
        problem_types: &doc["x-problem-types"],
    };
    let yaml = serde_saphyr::to_string(&ordered).expect("the document serializes");
    format!(
        "# The provider plug-in protocol of poolwright, version 1 (OpenAPI 3.1).\n\
         # Generated by `poolwright plugin openapi` from the Rust types; do not edit.\n{yaml}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_references_defined_schemas() {
        let doc = document();
        let text = serde_json::to_string(&doc).unwrap();
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        for piece in text.split("#/components/schemas/").skip(1) {
            let name: String = piece.chars().take_while(|c| *c != '"').collect();
            assert!(schemas.contains_key(&name), "undefined schema {name}");
        }
        for required in [
            "Capabilities",
            "PoolView",
            "NodeView",
            "NodeTemplate",
            "Problem",
        ] {
            assert!(schemas.contains_key(required), "{required}");
        }
    }

    #[test]
    fn the_yaml_reads_back_as_the_same_document() {
        let back: Value = serde_saphyr::from_str(&document_text()).unwrap();
        assert_eq!(back, document());
    }
}
