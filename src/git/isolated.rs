//! The child's side of a fetch whose memory is bounded.
//!
//! A pack is compressed: a 1 GiB blob of zeros is about 1 MiB on the wire,
//! and indexing a pack inflates each object whole to hash it. So the bounds
//! on the wire (`--git-max-bytes`, `--git-max-objects`) cannot bound the
//! memory a fetch takes, and a push (or a pull request's preview ref) could
//! take the daemon's host down. The daemon therefore fetches in a child
//! process of its own binary (`poolwright git-fetch-worker`, hidden, run by
//! [`super::child`]) whose data segment is capped: gix asks for an object's
//! memory before inflating it, so a bomb is refused within the cap and never
//! reaches the daemon. The parent's side is `Mirror::fetch_in_child`; what
//! a fetch brought is checked again once it is in, and a fetch refused for
//! any bound leaves nothing behind (`Mirror::bounded`).

use std::io::{Read, Write};

use super::mirror::{Answer, FetchError, Mirror, Request};

/// The largest request read by the child.
const REQUEST_LIMIT: u64 = 1024 * 1024;

/// `poolwright git-fetch-worker`: one fetch, asked on standard input,
/// answered on standard output.
pub fn worker() -> anyhow::Result<u8> {
    let mut text = String::new();
    std::io::stdin()
        .take(REQUEST_LIMIT)
        .read_to_string(&mut text)?;
    let req: Request = serde_json::from_str(&text)?;
    let answer: Answer = match Mirror::open(&req.state_root, req.options) {
        Ok(m) => m.fetch_here(),
        Err(e) => Err(FetchError::Local {
            path: req.state_root.display().to_string(),
            message: e.to_string(),
        }),
    };
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, &answer)?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(0)
}
