//! `--git-verify gpg`: the branch tip must carry an OpenPGP signature (git's
//! default `gpg.format openpgp`) made by a key of the keyring: public keys,
//! armored or binary, as `gpg --export [--armor]` writes them. Verified with
//! the `pgp` crate (rPGP), never by running `gpg`.
//!
//! A key signs for a commit when its self-signatures verify, it is not
//! revoked, it has not expired (when the signature was made, nor now), it is
//! the primary key (flagged for signing, or without flags) or a subkey bound
//! for signing, and the signature's hash is not MD5, SHA-1 or RIPEMD-160.
//!
//! The file is the whole trust: certifications by other keys are dropped
//! (no web of trust), and copies of one key (a key, then its revocation,
//! exported one after the other) are merged, so a revocation appended to the
//! file takes effect.

use super::BadKeys;
use std::io::Cursor;

use pgp::composed::{Deserializable, DetachedSignature, SignedPublicKey};
use pgp::crypto::hash::HashAlgorithm;
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
    /// Read a keyring, armored (any number of blocks) or binary; an error
    /// names the key that is wrong.
    pub fn parse(bytes: &[u8]) -> Result<Keyring, BadKeys> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(NO_KEY.into());
        }
        let mut keys: Vec<SignedPublicKey> = Vec::new();
        let mut add = |key: SignedPublicKey, n: usize| -> Result<(), BadKeys> {
            let key = self_signed_only(key);
            key.verify_bindings().map_err(|e| {
                format!(
                    "key {n} ({}): its self-signatures do not verify: {e}",
                    fingerprint(&key)
                )
            })?;
            match keys
                .iter_mut()
                .find(|k| k.primary_key.fingerprint() == key.primary_key.fingerprint())
            {
                Some(known) => merge(known, key),
                None => keys.push(key),
            }
            if keys.len() > MAX_KEYS {
                return Err(format!("more than {MAX_KEYS} keys").into());
            }
            Ok(())
        };
        let mut n = 0;
        for block in blocks(bytes)? {
            let parsed = match block {
                Block::Armored(text) => {
                    SignedPublicKey::from_armor_many(Cursor::new(text)).map(|(keys, _)| keys)
                }
                Block::Binary(raw) => SignedPublicKey::from_bytes_many(Cursor::new(raw)),
            }
            .map_err(|e| format!("not an OpenPGP keyring (gpg --export --armor KEYID): {e}"))?;
            for key in parsed {
                n += 1;
                let key = key.map_err(|e| {
                    format!("not an OpenPGP keyring (gpg --export --armor KEYID): key {n}: {e}")
                })?;
                add(key, n)?;
            }
        }
        if keys.is_empty() {
            return Err(NO_KEY.into());
        }
        Ok(Keyring { keys })
    }

    /// Is `signature` (the commit's `gpgsig` header) a valid OpenPGP
    /// signature over `payload` by a key of the ring, at `now`? Its first
    /// user id, if so. `signed_at` (the commit's time) stands in for a
    /// signature without a creation time.
    pub fn verify(
        &self,
        signature: Option<&[u8]>,
        payload: &[u8],
        signed_at: i64,
        now: i64,
    ) -> Result<String, Unverified> {
        let text = super::armored(signature, "-----BEGIN PGP SIGNATURE-----", "OpenPGP")?;
        let (sig, _) = DetachedSignature::from_armor_single(Cursor::new(text.trim().as_bytes()))
            .map_err(|e| Unverified::Malformed(e.to_string()))?;
        let sig = sig.signature;
        if !matches!(sig.typ(), Some(SignatureType::Binary | SignatureType::Text)) {
            return Err(Unverified::Malformed(
                "not a signature over data (a key or certification signature)".into(),
            ));
        }
        if let Some(weak) = sig.hash_alg().filter(|h| {
            matches!(
                h,
                HashAlgorithm::Md5 | HashAlgorithm::Sha1 | HashAlgorithm::Ripemd160
            )
        }) {
            return Err(Unverified::NotValidHere(format!(
                "the signature uses {weak}, which is too weak to trust (SHA-256 or better)"
            )));
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
        if let Some(why) = not_valid(key, signer, made, now) {
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

/// Why `signer` of `key` may not sign a signature made at `made`, checked
/// at `now`, if it may not.
fn not_valid(key: &SignedPublicKey, signer: Signer, made: i64, now: i64) -> Option<String> {
    if !key.details.revocation_signatures.is_empty() {
        return Some("the key is revoked".into());
    }
    let primary = latest(
        key.details
            .users
            .iter()
            .flat_map(|u| u.signatures.iter())
            .chain(key.details.direct_signatures.iter())
            .filter(|s| {
                matches!(
                    s.typ(),
                    Some(
                        SignatureType::CertGeneric
                            | SignatureType::CertPersona
                            | SignatureType::CertCasual
                            | SignatureType::CertPositive
                            | SignatureType::Key
                    )
                )
            }),
    );
    let expired = |at: Option<i64>| match at {
        Some(t) if made > t => Some("had expired when the commit was signed"),
        Some(t) if now > t => Some("has expired"),
        _ => None,
    };
    if let Some(when) = expired(primary.and_then(|s| expires(key.primary_key.created_at(), s))) {
        return Some(format!("the key {when}"));
    }
    let Signer::Subkey(i) = signer else {
        // A primary key whose flags leave out signing may not sign.
        return match primary.map(|s| s.key_flags()) {
            Some(f)
                if !f.sign()
                    && (f.certify()
                        || f.encrypt_comms()
                        || f.encrypt_storage()
                        || f.authentication()) =>
            {
                Some("the primary key is not flagged for signing".into())
            }
            _ => None,
        };
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
    if let Some(when) = expired(expires(sub.key.created_at(), binding)) {
        return Some(format!("the signing subkey {when}"));
    }
    None
}

/// The key with only its own signatures: certifications of its user ids
/// by other keys are dropped (the keyring is the whole trust, and they
/// cannot be verified without those keys).
fn self_signed_only(mut key: SignedPublicKey) -> SignedPublicKey {
    let fp = key.primary_key.fingerprint();
    let id = key.primary_key.legacy_key_id();
    let own = |s: &Signature| {
        let fps = s.issuer_fingerprint();
        let ids = s.issuer_key_id();
        (fps.is_empty() && ids.is_empty())
            || fps.iter().any(|f| **f == fp)
            || ids.iter().any(|i| **i == id)
    };
    for user in &mut key.details.users {
        user.signatures.retain(own);
    }
    for attr in &mut key.details.user_attributes {
        attr.signatures.retain(own);
    }
    key.details.direct_signatures.retain(own);
    key
}

/// Two copies of one key (each verified): one with every signature of both,
/// so a revocation in either counts.
fn merge(into: &mut SignedPublicKey, other: SignedPublicKey) {
    let d = &mut into.details;
    d.revocation_signatures
        .extend(other.details.revocation_signatures);
    d.direct_signatures.extend(other.details.direct_signatures);
    d.users.extend(other.details.users);
    d.user_attributes.extend(other.details.user_attributes);
    for sub in other.public_subkeys {
        let fp = sub.key.fingerprint();
        match into
            .public_subkeys
            .iter_mut()
            .find(|s| s.key.fingerprint() == fp)
        {
            Some(known) => known.signatures.extend(sub.signatures),
            None => into.public_subkeys.push(sub),
        }
    }
}

/// A keyring file's parts: each armored block, or the whole of a binary
/// file. Text outside the armored blocks is refused (it would be ignored).
enum Block<'a> {
    Armored(&'a [u8]),
    Binary(&'a [u8]),
}

const BEGIN: &str = "-----BEGIN PGP PUBLIC KEY BLOCK-----";
const END: &str = "-----END PGP PUBLIC KEY BLOCK-----";

fn blocks(bytes: &[u8]) -> Result<Vec<Block<'_>>, BadKeys> {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return Ok(vec![Block::Binary(bytes)]);
    };
    if !text.contains(BEGIN) {
        return Ok(vec![Block::Binary(bytes)]);
    }
    let mut out = Vec::new();
    let mut rest = text;
    loop {
        let Some(start) = rest.find(BEGIN) else {
            if !rest.trim().is_empty() {
                return Err(format!(
                    "text outside a {BEGIN} block: {:?}",
                    rest.trim().chars().take(40).collect::<String>()
                )
                .into());
            }
            return Ok(out);
        };
        if !rest[..start].trim().is_empty() {
            return Err(format!(
                "text outside a {BEGIN} block: {:?}",
                rest[..start].trim().chars().take(40).collect::<String>()
            )
            .into());
        }
        let Some(end) = rest[start..].find(END) else {
            return Err(format!("a {BEGIN} block without its end line").into());
        };
        let end = start + end + END.len();
        out.push(Block::Armored(&rest.as_bytes()[start..end]));
        rest = &rest[end..];
    }
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
        assert!(Keyring::parse(b"").unwrap_err().0.contains("no public key"));
        assert!(
            Keyring::parse(b" \n")
                .unwrap_err()
                .0
                .contains("no public key")
        );
        assert!(Keyring::parse(b"ssh-ed25519 AAAA... a@b").is_err());
        let err = Keyring::parse(
            b"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nnot base64 at all\n-----END PGP PUBLIC KEY BLOCK-----\n",
        )
        .unwrap_err();
        assert!(!err.0.is_empty());
    }

    #[test]
    fn every_armored_block_is_read_and_text_outside_them_refused() {
        let block = format!("{BEGIN}\n\nAAAA\n{END}\n");
        let two = format!("{block}\n{block}");
        assert_eq!(blocks(two.as_bytes()).unwrap().len(), 2);
        let parts: Vec<&[u8]> = blocks(two.as_bytes())
            .unwrap()
            .into_iter()
            .map(|b| match b {
                Block::Armored(t) => t,
                Block::Binary(_) => panic!("armored"),
            })
            .collect();
        assert!(
            parts
                .iter()
                .all(|p| p.starts_with(BEGIN.as_bytes()) && p.ends_with(END.as_bytes()))
        );
        for bad in [
            format!("{block}trailing words"),
            format!("leading words\n{block}"),
            format!("{BEGIN}\n\nAAAA\n"),
        ] {
            assert!(blocks(bad.as_bytes()).is_err(), "{bad}");
        }
        // Not text, or not armored: one binary keyring.
        assert!(matches!(
            blocks(&[0x99, 0x01, 0xff]).unwrap()[..],
            [Block::Binary(_)]
        ));
    }
}
