//! Only verified commits (`run --git-verify ssh|gpg`): the branch tip must
//! carry a signature by a trusted key, SSH (`ssh`, the allowed signers file
//! of git's `gpg.ssh.allowedSignersFile`) or OpenPGP (`openpgp`, a keyring of
//! public keys as `gpg --export` writes it). Each is verified with a crate
//! (`ssh-key`, `pgp`), never by running `ssh-keygen` or `gpg`.

mod openpgp;
mod ssh;

use std::fmt;

/// Why a file of trusted keys (allowed signers, an OpenPGP keyring) cannot
/// be used, as shown with the file's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadKeys(pub String);

impl From<String> for BadKeys {
    fn from(why: String) -> BadKeys {
        BadKeys(why)
    }
}

impl From<&str> for BadKeys {
    fn from(why: &str) -> BadKeys {
        BadKeys(why.to_string())
    }
}

pub use openpgp::Keyring;
pub use ssh::AllowedSigners;

/// How the commits applied are signed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// git's `gpg.format ssh`.
    Ssh,
    /// git's default `gpg.format openpgp` (`gpg`).
    OpenPgp,
}

impl Format {
    /// The flag that names the trusted keys' file.
    fn keys_flag(self) -> &'static str {
        match self {
            Format::Ssh => "--git-allowed-signers",
            Format::OpenPgp => "--git-keyring",
        }
    }

    /// As `--git-verify` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Ssh => "ssh",
            Format::OpenPgp => "gpg",
        }
    }
}

/// The keys whose signatures are applied.
#[derive(Clone, Debug)]
pub enum Trusted {
    Ssh(AllowedSigners),
    OpenPgp(Keyring),
}

/// The largest keys file read.
const KEYS_LIMIT: u64 = 1024 * 1024;

impl Trusted {
    /// Read the keys of `format` from `bytes` (the file's contents); an
    /// error says what in it is wrong.
    pub fn parse(format: Format, bytes: &[u8]) -> Result<Trusted, BadKeys> {
        match format {
            Format::Ssh => {
                let text = std::str::from_utf8(bytes)
                    .map_err(|_| "not text (an allowed signers file is text)".to_string())?;
                AllowedSigners::parse(text).map(Trusted::Ssh)
            }
            Format::OpenPgp => Keyring::parse(bytes).map(Trusted::OpenPgp),
        }
    }

    /// Read the keys file at `path`: a regular file, at most [`KEYS_LIMIT`].
    pub fn load(format: Format, path: &std::path::Path) -> Result<Trusted, BadKeys> {
        let bytes = crate::files::read_regular(path, KEYS_LIMIT)
            .map_err(|e| format!("{} {}: {e}", format.keys_flag(), path.display()))?;
        Trusted::parse(format, &bytes)
            .map_err(|e| BadKeys(format!("{} {}: {e}", format.keys_flag(), path.display())))
    }

    /// Is `signature` (the commit's `gpgsig` header) a valid signature over
    /// `payload` (the commit without that header) by a trusted key, made at
    /// `signed_at` (the commit's time) and checked at `now` (seconds since
    /// the epoch)? Who signed, if so.
    pub fn verify(
        &self,
        signature: Option<&[u8]>,
        payload: &[u8],
        signed_at: i64,
        now: i64,
    ) -> Result<String, Unverified> {
        match self {
            // git compares an SSH key's validity with the commit's time.
            Trusted::Ssh(keys) => keys.verify(signature, payload, signed_at),
            Trusted::OpenPgp(keys) => keys.verify(signature, payload, signed_at, now),
        }
    }
}

/// A commit's signature as text, when it is in the format verified (its
/// armor starts with `begin`); why not, when it is not.
fn armored<'a>(
    signature: Option<&'a [u8]>,
    begin: &str,
    format: &'static str,
) -> Result<std::borrow::Cow<'a, str>, Unverified> {
    let Some(signature) = signature else {
        return Err(Unverified::Unsigned);
    };
    let text = String::from_utf8_lossy(signature);
    if !text.trim_start().starts_with(begin) {
        return Err(Unverified::OtherFormat(format));
    }
    Ok(text)
}

/// Why a commit is not verified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unverified {
    Unsigned,
    /// Signed, but not in the format verified (the format expected).
    OtherFormat(&'static str),
    Malformed(String),
    /// Signed by a key that is not trusted.
    UnknownKey(String),
    /// A trusted key, but the signature does not match the commit.
    BadSignature(String),
    /// A trusted key, outside its namespaces or validity, expired or revoked.
    NotValidHere(String),
}

impl Unverified {
    /// The `reason` label of `poolwright_git_commits_refused_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            Unverified::Unsigned => "unsigned",
            Unverified::OtherFormat(_) | Unverified::Malformed(_) => "bad-signature",
            Unverified::UnknownKey(_) => "unknown-key",
            Unverified::BadSignature(_) => "bad-signature",
            Unverified::NotValidHere(_) => "key-not-valid",
        }
    }
}

impl fmt::Display for Unverified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unverified::Unsigned => write!(f, "the commit is not signed"),
            Unverified::OtherFormat(expected) => write!(
                f,
                "the commit is signed, but not with {expected} (the format --git-verify takes)"
            ),
            Unverified::Malformed(e) => write!(f, "the signature cannot be read: {e}"),
            Unverified::UnknownKey(k) => {
                write!(f, "signed by {k}, which is not among the trusted keys")
            }
            Unverified::BadSignature(who) => write!(
                f,
                "the signature by {who} does not match the commit (tampered?)"
            ),
            Unverified::NotValidHere(why) => write!(f, "{why}"),
        }
    }
}
