//! `--git-verify ssh`: the branch tip must carry an SSH signature (git's
//! `gpg.format ssh`) made by a key of the allowed signers file, in the
//! format of git's `gpg.ssh.allowedSignersFile`. Verified with the `ssh-key`
//! crate, never by running `ssh-keygen`.

use super::BadKeys;
use ssh_key::{PublicKey, SshSig};

use super::Unverified;

/// The namespace git signs commits in.
const NAMESPACE: &str = "git";

/// One line of an allowed signers file.
#[derive(Clone, Debug)]
struct Signer {
    principals: String,
    key: PublicKey,
    /// `namespaces="..."`: where the key may sign; every namespace when unset.
    namespaces: Option<Vec<String>>,
    /// `valid-after` / `valid-before`, as seconds since the epoch.
    valid_after: Option<i64>,
    valid_before: Option<i64>,
}

/// The keys that may sign what is applied.
#[derive(Clone, Debug, Default)]
pub struct AllowedSigners {
    signers: Vec<Signer>,
}

impl AllowedSigners {
    /// Parse an allowed signers file; an error names the line.
    pub fn parse(text: &str) -> Result<AllowedSigners, BadKeys> {
        let mut signers = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let signer = parse_line(line).map_err(|e| format!("line {}: {e}", n + 1))?;
            signers.push(signer);
        }
        if signers.is_empty() {
            return Err("no key in it".into());
        }
        Ok(AllowedSigners { signers })
    }

    pub fn len(&self) -> usize {
        self.signers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.signers.is_empty()
    }

    /// Is `signature` (the commit's `gpgsig` header) a valid SSH signature
    /// over `payload` (the commit without it) by an allowed key, at
    /// `signed_at` (the commit's time)? The principal that signed, if so.
    pub fn verify(
        &self,
        signature: Option<&[u8]>,
        payload: &[u8],
        signed_at: i64,
    ) -> Result<String, Unverified> {
        let text = super::armored(signature, "-----BEGIN SSH SIGNATURE-----", "SSH")?;
        let sig = SshSig::from_pem(text.trim().as_bytes())
            .map_err(|e| Unverified::Malformed(e.to_string()))?;
        if sig.namespace() != NAMESPACE {
            return Err(Unverified::NotValidHere(format!(
                "the signature is for namespace {:?}, not {NAMESPACE:?}",
                sig.namespace()
            )));
        }
        let signer_key = sig.public_key();
        let fingerprint = PublicKey::from(signer_key.clone())
            .fingerprint(Default::default())
            .to_string();
        let mut matching = self
            .signers
            .iter()
            .filter(|s| s.key.key_data() == signer_key)
            .peekable();
        if matching.peek().is_none() {
            return Err(Unverified::UnknownKey(fingerprint));
        }
        let mut why = None;
        for s in matching {
            if s.namespaces
                .as_ref()
                .is_some_and(|ns| !ns.iter().any(|n| n == NAMESPACE))
            {
                why = Some(Unverified::NotValidHere(format!(
                    "{} may not sign in namespace {NAMESPACE:?} (namespaces=)",
                    s.principals
                )));
                continue;
            }
            if s.valid_after.is_some_and(|t| signed_at < t)
                || s.valid_before.is_some_and(|t| signed_at > t)
            {
                why = Some(Unverified::NotValidHere(format!(
                    "{}'s key was not valid when the commit was made (valid-after/valid-before)",
                    s.principals
                )));
                continue;
            }
            return match s.key.verify(NAMESPACE, payload, &sig) {
                Ok(()) => Ok(s.principals.clone()),
                Err(_) => Err(Unverified::BadSignature(format!(
                    "{} ({fingerprint})",
                    s.principals
                ))),
            };
        }
        Err(why.unwrap_or(Unverified::UnknownKey(fingerprint)))
    }
}

fn parse_line(line: &str) -> Result<Signer, BadKeys> {
    let mut words = line.split_whitespace();
    let principals = words.next().ok_or("empty")?.to_string();
    let rest: Vec<&str> = words.collect();
    // The key starts at its type; options come before it.
    let at = rest
        .iter()
        .position(|w| is_key_type(w))
        .ok_or("no public key (ssh-ed25519 AAAA..., ecdsa-sha2-..., ssh-rsa ...)")?;
    let mut signer = Signer {
        principals,
        key: PublicKey::from_openssh(&rest[at..].join(" "))
            .map_err(|e| format!("the public key: {e}"))?,
        namespaces: None,
        valid_after: None,
        valid_before: None,
    };
    for option in options(&rest[..at].join(" "))? {
        let (name, value) = option.split_once('=').unwrap_or((option.as_str(), ""));
        let value = value.trim_matches('"');
        match name.to_ascii_lowercase().as_str() {
            "namespaces" => {
                signer.namespaces = Some(value.split(',').map(str::to_string).collect());
            }
            "valid-after" => signer.valid_after = Some(parse_time(value)?),
            "valid-before" => signer.valid_before = Some(parse_time(value)?),
            other => {
                return Err(format!(
                    "option {other:?} is not supported (namespaces, valid-after, valid-before)"
                )
                .into());
            }
        }
    }
    Ok(signer)
}

/// The options of a line, split on the commas outside double quotes.
fn options(text: &str) -> Result<Vec<String>, BadKeys> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    for c in text.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                current.push(c);
            }
            ',' if !quoted => out.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    if quoted {
        return Err(format!("unbalanced quotes in the options {text:?}").into());
    }
    out.push(current);
    Ok(out.into_iter().filter(|o| !o.is_empty()).collect())
}

fn is_key_type(word: &str) -> bool {
    word.starts_with("ssh-") || word.starts_with("ecdsa-") || word.starts_with("sk-")
}

/// `YYYYMMDD[HHMM[SS]]`, UTC (a trailing `Z` is allowed).
fn parse_time(s: &str) -> Result<i64, BadKeys> {
    let digits = s.trim_end_matches('Z');
    let bad = || format!("{s:?} is not a time like 20261203 or 202612031040");
    if !digits.chars().all(|c| c.is_ascii_digit()) || ![8, 12, 14].contains(&digits.len()) {
        return Err(bad().into());
    }
    let num = |r: std::ops::Range<usize>| -> i16 {
        digits.get(r).and_then(|d| d.parse().ok()).unwrap_or(0)
    };
    let date =
        jiff::civil::Date::new(num(0..4), num(4..6) as i8, num(6..8) as i8).map_err(|_| bad())?;
    let time = jiff::civil::Time::new(num(8..10) as i8, num(10..12) as i8, num(12..14) as i8, 0)
        .map_err(|_| bad())?;
    let at = jiff::civil::DateTime::from_parts(date, time)
        .to_zoned(jiff::tz::TimeZone::UTC)
        .map_err(|_| bad())?;
    Ok(at.timestamp().as_second())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_signers_lines_are_read_like_git_reads_them() {
        let key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIC1zr0npcDh9luDCNRgdQjF/NsQpfFXERh58llfx5H/c sre@example.com";
        let text = format!(
            "# the release managers\nsre@example.com {key}\nci@example.com namespaces=\"git\",valid-after=20260101 {key}\n"
        );
        let allowed = AllowedSigners::parse(&text).unwrap();
        assert_eq!(allowed.len(), 2);
        assert_eq!(allowed.signers[1].namespaces, Some(vec!["git".to_string()]));
        assert_eq!(allowed.signers[1].valid_after, Some(1_767_225_600));
        assert!(AllowedSigners::parse("").unwrap_err().0.contains("no key"));
        assert!(
            AllowedSigners::parse("a@b cert-authority ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIC1zr0npcDh9luDCNRgdQjF/NsQpfFXERh58llfx5H/c")
                .unwrap_err()
                .0
                .starts_with("line 1:")
        );
        assert!(AllowedSigners::parse("a@b nokey").is_err());
        // A quoted list of namespaces, as git writes it; impossible dates refused.
        let both = format!("ci@example.com namespaces=\"git,file\",valid-before=20301231 {key}");
        let allowed_both = AllowedSigners::parse(&both).unwrap();
        assert_eq!(
            allowed_both.signers[0].namespaces,
            Some(vec!["git".to_string(), "file".to_string()])
        );
        for bad in ["20261399", "2026120", "20261203256000"] {
            let line = format!("a@b valid-after={bad} {key}");
            assert!(AllowedSigners::parse(&line).is_err(), "{bad}");
        }
        assert_eq!(allowed.verify(None, b"tree", 0), Err(Unverified::Unsigned));
        assert_eq!(
            allowed.verify(Some(b"-----BEGIN PGP SIGNATURE-----\n..."), b"tree", 0),
            Err(Unverified::OtherFormat("SSH"))
        );
        assert!(matches!(
            allowed.verify(
                Some(b"-----BEGIN SSH SIGNATURE-----\nnope\n-----END SSH SIGNATURE-----"),
                b"tree",
                0
            ),
            Err(Unverified::Malformed(_))
        ));
    }
}
