//! Test certificates, made with `openssl` (installed by `scripts/test.sh`):
//! private CAs and the certificates they sign, for the TLS plug-in test and
//! the config repo over https.

use std::path::Path;
use std::process::Command;

/// Run `openssl` in `dir`; a failure fails the test with openssl's own words.
pub fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run openssl (it makes the test certificates): {e}"));
    assert!(
        out.status.success(),
        "openssl {} failed ({}):\n{}{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `NAME.key`: a P-256 key (PKCS#8 PEM; named curve, as rustls requires).
pub fn test_key(dir: &Path, name: &str) {
    openssl(
        dir,
        &[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-pkeyopt",
            "ec_param_enc:named_curve",
            "-out",
            &format!("{name}.key"),
        ],
    );
}

/// `NAME.key` and `NAME.pem`: a self-signed CA.
pub fn test_ca(dir: &Path, name: &str, cn: &str) {
    test_key(dir, name);
    std::fs::write(
        dir.join(format!("{name}.cnf")),
        format!(
            "[req]\ndistinguished_name = dn\nprompt = no\nx509_extensions = ext\n[dn]\nCN = {cn}\n\
             [ext]\nbasicConstraints = critical,CA:TRUE\nkeyUsage = critical,keyCertSign,cRLSign\nsubjectKeyIdentifier = hash\n"
        ),
    )
    .unwrap();
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-new",
            "-config",
            &format!("{name}.cnf"),
            "-key",
            &format!("{name}.key"),
            "-sha256",
            "-days",
            "2",
            "-out",
            &format!("{name}.pem"),
        ],
    );
}

/// `NAME.key` and `NAME.pem`: a certificate for `cn` signed by the CA `ca`,
/// with the extensions `ext` (extfile lines) besides the usual ones.
pub fn test_leaf(dir: &Path, name: &str, cn: &str, ca: &str, ext: &str) {
    test_key(dir, name);
    std::fs::write(
        dir.join(format!("{name}.cnf")),
        format!("[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = {cn}\n"),
    )
    .unwrap();
    std::fs::write(
        dir.join(format!("{name}.ext")),
        format!(
            "basicConstraints = critical,CA:FALSE\nkeyUsage = critical,digitalSignature\n\
             subjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid\n{ext}"
        ),
    )
    .unwrap();
    openssl(
        dir,
        &[
            "req",
            "-new",
            "-config",
            &format!("{name}.cnf"),
            "-key",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.pem"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-sha256",
            "-extfile",
            &format!("{name}.ext"),
            "-out",
            &format!("{name}.pem"),
        ],
    );
}

/// A private CA `ca.pem` and a server certificate `server.pem` (key
/// `server.key`) for 127.0.0.1, in `dir`.
pub fn server_pki(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    test_ca(dir, "ca", "poolwright test CA");
    test_leaf(
        dir,
        "server",
        "127.0.0.1",
        "ca",
        "extendedKeyUsage = serverAuth\nsubjectAltName = IP:127.0.0.1\n",
    );
}
