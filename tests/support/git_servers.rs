//! git's own servers for tests, on loopback ports: `git daemon` (git://),
//! `git http-backend` behind lighttpd with TLS and basic authentication (smart
//! HTTP with a token), and OpenSSH's `sshd` with a deploy key. Each is Debian's
//! (git, lighttpd with lighttpd-mod-openssl, openssh-server), installed by
//! `scripts/test.sh`; one that
//! cannot start fails the test with the reason.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::moto::free_port;

fn wait_listening(port: u16, what: &str, log: &Path) {
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{what} did not listen on {port}: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn spawn(cmd: &mut Command, what: &str, log: &Path) -> Child {
    use std::os::unix::process::CommandExt;
    cmd.process_group(0)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("{what} cannot start ({e}); `bash scripts/test.sh` installs it from Debian")
        })
}

/// Run `git` in `dir` as a fixed author; a failure fails the test with
/// git's own words.
pub fn git(dir: &Path, args: &[&str]) {
    git_with(dir, args, &[]);
}

/// `git` with further environment (`GNUPGHOME` for signing with gpg).
pub fn git_with(dir: &Path, args: &[&str], env: &[(&str, &Path)]) {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .envs(env.iter().copied())
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A server process in a process group of its own (its workers with it),
/// killed with them when dropped.
pub struct Server {
    child: Child,
    pub port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `git daemon` exporting every repository under `base`.
pub fn git_daemon(base: &Path) -> Server {
    let port = free_port();
    let log = base.join("git-daemon.log");
    let child = spawn(
        Command::new("git").args([
            "daemon",
            "--reuseaddr",
            "--export-all",
            "--listen=127.0.0.1",
            &format!("--port={port}"),
            &format!("--base-path={}", base.display()),
            &base.display().to_string(),
        ]),
        "git daemon",
        &log,
    );
    wait_listening(port, "git daemon", &log);
    Server { child, port }
}

/// lighttpd serving the repositories under `base` at `https://127.0.0.1:PORT/git/`
/// through `git http-backend`, to the user `x-access-token` with `token` as
/// password; its certificate is signed by the CA `base/lighttpd/ca.pem`.
pub fn smart_https(base: &Path, token: &str) -> Server {
    let port = free_port();
    let dir = base.join("lighttpd");
    super::tls::server_pki(&dir);
    let backend = [
        "/usr/lib/git-core/git-http-backend",
        "/usr/libexec/git-core/git-http-backend",
    ]
    .into_iter()
    .find(|p| Path::new(p).exists())
    .expect("git http-backend (Debian's git package)");
    std::fs::write(dir.join("users"), format!("x-access-token:{token}\n")).unwrap();
    let conf = format!(
        r#"server.modules = ("mod_openssl", "mod_auth", "mod_authn_file", "mod_alias", "mod_setenv", "mod_cgi")
server.port = {port}
server.bind = "127.0.0.1"
ssl.engine = "enable"
ssl.pemfile = "{dir}/server.pem"
ssl.privkey = "{dir}/server.key"
server.document-root = "{root}"
server.errorlog = "{dir}/error.log"
server.pid-file = "{dir}/lighttpd.pid"
alias.url = ( "/git/" => "{backend}/" )
$HTTP["url"] =~ "^/git/" {{
    cgi.assign = ( "" => "" )
    setenv.add-environment = ( "GIT_PROJECT_ROOT" => "{root}", "GIT_HTTP_EXPORT_ALL" => "1" )
    auth.backend = "plain"
    auth.backend.plain.userfile = "{dir}/users"
    auth.require = ( "" => ( "method" => "basic", "realm" => "git", "require" => "valid-user" ) )
}}
"#,
        root = base.display(),
        dir = dir.display(),
    );
    let conf_path = dir.join("lighttpd.conf");
    std::fs::write(&conf_path, conf).unwrap();
    let log = dir.join("stderr.log");
    let lighttpd = ["/usr/sbin/lighttpd", "/usr/bin/lighttpd"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("lighttpd");
    let child = spawn(
        Command::new(lighttpd).args(["-D", "-f"]).arg(&conf_path),
        "lighttpd",
        &log,
    );
    wait_listening(port, "lighttpd", &log);
    Server { child, port }
}

/// sshd on a loopback port taking the key `authorized` for the current
/// user; its host key's line for a known-hosts file.
pub struct Sshd {
    pub server: Server,
    pub known_hosts_line: String,
    pub user: String,
}

pub fn ssh_keygen(path: &Path, comment: &str) -> String {
    let _ = std::fs::remove_file(path);
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f"])
        .arg(path)
        .output()
        .expect("ssh-keygen runs (Debian's openssh-client)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(path.with_extension("pub"))
        .unwrap()
        .trim()
        .to_string()
}

/// A GnuPG home of its own, for OpenPGP keys that sign commits; its agent
/// is stopped when it is dropped.
pub struct Gnupg {
    pub home: PathBuf,
}

impl Gnupg {
    pub fn new(base: &Path) -> Gnupg {
        let home = base.join("gnupg");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .unwrap();
        Gnupg { home }
    }

    fn gpg(&self, args: &[&str]) -> Vec<u8> {
        let out = Command::new("gpg")
            .env("GNUPGHOME", &self.home)
            .args([
                "--batch",
                "--no-tty",
                "--pinentry-mode",
                "loopback",
                "--passphrase",
                "",
            ])
            .args(args)
            .output()
            .expect("gpg runs (Debian's gnupg)");
        assert!(
            out.status.success(),
            "gpg {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// A new ed25519 signing key for `email`; its fingerprint.
    pub fn key(&self, email: &str) -> String {
        self.gpg(&[
            "--quick-gen-key",
            &format!("Test <{email}>"),
            "ed25519",
            "sign",
            "never",
        ]);
        let listing =
            String::from_utf8(self.gpg(&["--with-colons", "--list-keys", email])).unwrap();
        listing
            .lines()
            .find_map(|l| l.strip_prefix("fpr:"))
            .and_then(|l| l.split(':').find(|f| !f.is_empty()))
            .expect("a fingerprint")
            .to_string()
    }

    /// `by` certifies `key` (a third party's signature on its user id).
    pub fn certify(&self, key: &str, by: &str) {
        self.gpg(&["--default-key", by, "--quick-sign-key", key]);
    }

    /// The public key `fingerprint` with its revocation (the certificate
    /// gpg made with the key), armored; this home still signs with it.
    pub fn revoked(&self, fingerprint: &str) -> Vec<u8> {
        let other = Gnupg::new(&self.home);
        let public = self.home.join("public.asc");
        std::fs::write(&public, self.export(&[fingerprint])).unwrap();
        other.gpg(&["--import", public.to_str().unwrap()]);
        let cert = self
            .home
            .join(format!("openpgp-revocs.d/{fingerprint}.rev"));
        // gpg writes it with a leading ':' so it is not imported by mistake.
        let text = std::fs::read_to_string(cert)
            .unwrap()
            .replace(":-----BEGIN", "-----BEGIN");
        let armored = self.home.join("revocation.asc");
        std::fs::write(&armored, text).unwrap();
        other.gpg(&["--import", armored.to_str().unwrap()]);
        other.export(&[fingerprint])
    }

    /// The public keys of `fingerprints`, armored, as `gpg --export` writes them.
    pub fn export(&self, fingerprints: &[&str]) -> Vec<u8> {
        let mut args = vec!["--armor", "--export"];
        args.extend_from_slice(fingerprints);
        self.gpg(&args)
    }
}

impl Drop for Gnupg {
    fn drop(&mut self) {
        let _ = Command::new("gpgconf")
            .env("GNUPGHOME", &self.home)
            .args(["--kill", "gpg-agent"])
            .output();
    }
}

pub fn sshd(base: &Path, authorized_pub: &str) -> Sshd {
    let port = free_port();
    let dir = base.join("sshd");
    std::fs::create_dir_all(&dir).unwrap();
    let host_key = dir.join("host_key");
    let host_pub = ssh_keygen(&host_key, "test-host");
    let authorized = dir.join("authorized_keys");
    std::fs::write(&authorized, format!("{authorized_pub}\n")).unwrap();
    let user = std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| {
            String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout)
                .unwrap()
                .trim()
                .to_string()
        });
    let conf = format!(
        "Port {port}\nListenAddress 127.0.0.1\nHostKey {host}\nAuthorizedKeysFile {auth}\nPidFile {dir}/sshd.pid\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\nPermitRootLogin prohibit-password\nUsePAM no\nStrictModes no\nAllowUsers {user}\n",
        host = host_key.display(),
        auth = authorized.display(),
        dir = dir.display(),
    );
    let conf_path = dir.join("sshd_config");
    std::fs::write(&conf_path, conf).unwrap();
    // sshd's privilege separation directory.
    let _ = std::fs::create_dir_all("/run/sshd");
    let log = dir.join("sshd.log");
    let sshd = ["/usr/sbin/sshd", "/usr/bin/sshd"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("sshd");
    let child = spawn(
        Command::new(sshd).args(["-D", "-e", "-f"]).arg(&conf_path),
        "sshd",
        &log,
    );
    wait_listening(port, "sshd", &log);
    let mut words = host_pub.split_whitespace();
    let (kind, key) = (words.next().unwrap(), words.next().unwrap());
    Sshd {
        server: Server { child, port },
        known_hosts_line: format!("[127.0.0.1]:{port} {kind} {key}"),
        user,
    }
}
