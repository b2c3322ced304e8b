//! `--git-verify gpg`: the branch tip must carry an OpenPGP signature (git's
//! default `gpg.format openpgp`) made by a key of the keyring: public keys,
//! armored or binary, as `gpg --export [--armor]` writes them. Verified with
//! the `pgp` crate (rPGP), never by running `gpg`.
//!
//! A key signs for a commit when its self-signatures verify, it is not
//! revoked, it had not expired when the signature was made, and it is the
//! primary key or a subkey bound for signing.

use std::io::Cursor;

use pgp::composed::{Deserializable, DetachedSignature, SignedPublicKey};
use pgp::packet::{Signature, SignatureType};
use pgp::types::{KeyDetails, Timestamp};

use super::Unverified;

/// The keys that may sign what is applied.
#[derive(Clone, Debug)]
pub struct Keyring {
    keys: Vec<SignedPublicKey>,
}

const NO_KEY: &str = "no public key in it (gpg --export --armor KEYID)";

/// The most keys a keyring may hold (a bound on what a file can make us do).
const MAX_KEYS: usize = 1000;

impl Keyring {
    /// Read a keyring; an error names the key that is wrong.
    pub fn parse(bytes: &[u8]) -> Result<Keyring, String> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(NO_KEY.into());
        }
        let (parsed, _) = SignedPublicKey::from_reader_many(Cursor::new(bytes))
            .map_err(|e| format!("not an OpenPGP keyring (gpg --export --armor KEYID): {e}"))?;
        let mut keys = Vec::new();
        for (n, key) in parsed.enumerate() {
            let key = key.map_err(|e| format!("key {}: {e}", n + 1))?;
            key.verify_bindings().map_err(|e| {
                format!(
                    "key {} ({}): its self-signatures do not verify: {e}",
                    n + 1,
                    fingerprint(&key)
                )
            })?;
            keys.push(key);
            if keys.len() > MAX_KEYS {
                return Err(format!("more than {MAX_KEYS} keys"));
            }
        }
        if keys.is_empty() {
            return Err(NO_KEY.into());
        }
        Ok(Keyring { keys })
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Is `signature` (the commit's `gpgsig` header) a valid OpenPGP
    /// signature over `payload` by a key of the ring? Its first user id, if
    /// so. `signed_at` (the commit's time) stands in for a signature without
    /// a creation time.
    pub fn verify(
        &self,
        signature: Option<&[u8]>,
        payload: &[u8],
        signed_at: i64,
    ) -> Result<String, Unverified> {
        let Some(signature) = signature else {
            return Err(Unverified::Unsigned);
        };
        let text = String::from_utf8_lossy(signature);
        if !text
            .trim_start()
            .starts_with("-----BEGIN PGP SIGNATURE-----")
        {
            return Err(Unverified::OtherFormat("OpenPGP"));
        }
        let (sig, _) = DetachedSignature::from_armor_single(Cursor::new(text.trim().as_bytes()))
            .map_err(|e| Unverified::Malformed(e.to_string()))?;
        let sig = sig.signature;
        if !matches!(sig.typ(), Some(SignatureType::Binary | SignatureType::Text)) {
            return Err(Unverified::Malformed(
                "not a signature over data (a key or certification signature)".into(),
            ));
        }
        let made = sig
            .created()
            .map(|t| i64::from(t.as_secs()))
            .unwrap_or(signed_at);
        let issuer = issuer(&sig);
        let Some((key, signer)) = self.signer(&sig) else {
            return Err(Unverified::UnknownKey(issuer));
        };
        let who = format!("{} ({issuer})", user(key));
        if let Some(why) = not_valid(key, signer, made) {
            return Err(Unverified::NotValidHere(format!("{who}: {why}")));
        }
        let verified = match signer {
            Signer::Primary => sig.verify(&key.primary_key, payload),
            Signer::Subkey(i) => sig.verify(&key.public_subkeys[i].key, payload),
        };
        verified
            .map(|()| user(key))
            .map_err(|_| Unverified::BadSignature(who))
    }

    /// The key of the ring that made `sig`: by its issuer fingerprint, or
    /// (older signatures) its key id.
    fn signer(&self, sig: &Signature) -> Option<(&SignedPublicKey, Signer)> {
        let fingerprints = sig.issuer_fingerprint();
        let ids = sig.issuer_key_id();
        let made_by = |k: &dyn KeyDetails| {
            let fp = k.fingerprint();
            let id = k.legacy_key_id();
            fingerprints.iter().any(|f| **f == fp) || ids.iter().any(|i| **i == id)
        };
        self.keys.iter().find_map(|key| {
            if made_by(&key.primary_key) {
                return Some((key, Signer::Primary));
            }
            key.public_subkeys
                .iter()
                .position(|s| made_by(&s.key))
                .map(|i| (key, Signer::Subkey(i)))
        })
    }
}

/// Which key of a certificate made a signature.
#[derive(Clone, Copy, Debug)]
enum Signer {
    Primary,
    Subkey(usize),
}

/// Why `signer` of `key` may not sign at `made`, if it may not.
fn not_valid(key: &SignedPublicKey, signer: Signer, made: i64) -> Option<String> {
    if !key.details.revocation_signatures.is_empty() {
        return Some("the key is revoked".into());
    }
    let primary_expiry = latest(key.details.users.iter().flat_map(|u| u.signatures.iter()))
        .and_then(|s| expires(key.primary_key.created_at(), s));
    if primary_expiry.is_some_and(|t| made > t) {
        return Some("the key had expired when the commit was signed".into());
    }
    let Signer::Subkey(i) = signer else {
        return None;
    };
    let sub = &key.public_subkeys[i];
    if sub
        .signatures
        .iter()
        .any(|s| s.typ() == Some(SignatureType::SubkeyRevocation))
    {
        return Some("the signing subkey is revoked".into());
    }
    let binding = latest(
        sub.signatures
            .iter()
            .filter(|s| s.typ() == Some(SignatureType::SubkeyBinding)),
    )?;
    if !binding.key_flags().sign() {
        return Some("the subkey that signed is not bound for signing".into());
    }
    if expires(sub.key.created_at(), binding).is_some_and(|t| made > t) {
        return Some("the signing subkey had expired when the commit was signed".into());
    }
    None
}

/// The newest of some self-signatures.
fn latest<'a>(sigs: impl Iterator<Item = &'a Signature>) -> Option<&'a Signature> {
    sigs.max_by_key(|s| s.created().map(Timestamp::as_secs).unwrap_or(0))
}

/// When a key created at `created` expires, by its self-signature `sig`.
fn expires(created: Timestamp, sig: &Signature) -> Option<i64> {
    sig.key_expiration_time()
        .filter(|d| d.as_secs() > 0)
        .map(|d| i64::from(created.as_secs()) + i64::from(d.as_secs()))
}

fn user(key: &SignedPublicKey) -> String {
    key.details
        .users
        .first()
        .map(|u| String::from_utf8_lossy(u.id.id()).into_owned())
        .unwrap_or_else(|| fingerprint(key))
}

fn fingerprint(key: &SignedPublicKey) -> String {
    format!("{:X}", key.primary_key.fingerprint())
}

/// The issuer a signature names, for messages.
fn issuer(sig: &Signature) -> String {
    if let Some(fp) = sig.issuer_fingerprint().first() {
        return format!("{fp:X}");
    }
    match sig.issuer_key_id().first() {
        Some(id) => format!("key id {id}"),
        None => "a key it does not name".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_not_a_keyring_or_an_openpgp_signature_is_refused_with_why() {
        assert!(Keyring::parse(b"").unwrap_err().contains("no public key"));
        assert!(
            Keyring::parse(b" \n")
                .unwrap_err()
                .contains("no public key")
        );
        assert!(Keyring::parse(b"ssh-ed25519 AAAA... a@b").is_err());
        let err = Keyring::parse(
            b"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nnot base64 at all\n-----END PGP PUBLIC KEY BLOCK-----\n",
        )
        .unwrap_err();
        assert!(!err.is_empty());
    }
}
