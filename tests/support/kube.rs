//! A real Kubernetes control plane for tests: kine (sqlite) + kube-apiserver
//! v1.36 + kwok playing the kubelets, all on 127.0.0.1 with static token auth,
//! built from Go modules by scripts/test-components.sh (which scripts/test.sh
//! runs) and found through `POOLWRIGHT_TEST_BIN`. One control plane per test
//! (each gets its own ports and data), torn down when the test's value drops.
//! If it cannot start, the test fails with the reason.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const TOKEN: &str = "poolwright-test-token";

pub struct ControlPlane {
    pub url: String,
    pub kubeconfig: PathBuf,
    dir: tempfile::TempDir,
    children: Vec<Child>,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn bin_dir() -> PathBuf {
    match std::env::var("POOLWRIGHT_TEST_BIN") {
        Ok(d) if Path::new(&d).join("kube-apiserver").exists() => PathBuf::from(d),
        Ok(d) => panic!(
            "POOLWRIGHT_TEST_BIN={d} has no kube-apiserver: run scripts/test-components.sh (scripts/test.sh does)"
        ),
        Err(_) => panic!(
            "POOLWRIGHT_TEST_BIN is not set: the Kubernetes tests need kine, kube-apiserver and kwok; \
             run them through scripts/test.sh, or export POOLWRIGHT_TEST_BIN=$(bash scripts/test-components.sh)"
        ),
    }
}

fn spawn(dir: &Path, name: &str, exe: &Path, args: &[String]) -> Child {
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", exe.display()))
}

impl ControlPlane {
    pub fn start() -> ControlPlane {
        let bin = bin_dir();
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let (kine_port, api_port) = (free_port(), free_port());
        std::fs::write(
            d.join("tokens.csv"),
            format!("{TOKEN},admin,admin,system:masters\n"),
        )
        .unwrap();
        let key = Command::new("openssl")
            .args(["genrsa", "-out"])
            .arg(d.join("sa.key"))
            .arg("2048")
            .stderr(Stdio::null())
            .status()
            .expect("openssl runs");
        assert!(
            key.success(),
            "openssl could not make a service-account key"
        );
        let mut children = vec![spawn(
            d,
            "kine",
            &bin.join("kine"),
            &[
                "--listen-address".into(),
                format!("127.0.0.1:{kine_port}"),
                "--endpoint".into(),
                format!("sqlite://{}/kine.db?_journal=WAL&cache=shared", d.display()),
                "--metrics-bind-address=0".into(),
            ],
        )];
        let p = |f: &str| d.join(f).display().to_string();
        children.push(spawn(
            d,
            "kube-apiserver",
            &bin.join("kube-apiserver"),
            &[
                format!("--etcd-servers=http://127.0.0.1:{kine_port}"),
                format!("--token-auth-file={}", p("tokens.csv")),
                format!("--service-account-key-file={}", p("sa.key")),
                format!("--service-account-signing-key-file={}", p("sa.key")),
                "--service-account-issuer=https://kubernetes.default.svc".into(),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={api_port}"),
                format!("--cert-dir={}", p("certs")),
                "--authorization-mode=RBAC".into(),
                "--disable-admission-plugins=ServiceAccount".into(),
            ],
        ));
        let url = format!("https://127.0.0.1:{api_port}");
        let kubeconfig = d.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster: {{server: \"{url}\", insecure-skip-tls-verify: true}}\nusers:\n- name: admin\n  user: {{token: {TOKEN}}}\ncontexts:\n- name: test\n  context: {{cluster: test, user: admin}}\ncurrent-context: test\n"
            ),
        )
        .unwrap();
        let mut cp = ControlPlane {
            url,
            kubeconfig,
            dir,
            children,
        };
        cp.wait_ready();
        let kwok = spawn(
            cp.dir.path(),
            "kwok",
            &bin.join("kwok"),
            &[
                format!("--kubeconfig={}", cp.kubeconfig.display()),
                format!("--config={}", bin.join("kwok-stages.yaml").display()),
                format!("--server-address=127.0.0.1:{}", free_port()),
                "--manage-all-nodes=false".into(),
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake".into(),
                "--manage-nodes-with-label-selector=".into(),
                "--cidr=10.0.0.1/24".into(),
                "--node-ip=10.0.0.1".into(),
                "--node-lease-duration-seconds=40".into(),
            ],
        );
        cp.children.push(kwok);
        cp
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{name}.log"))).unwrap_or_default()
    }

    fn wait_ready(&mut self) {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(90) {
            for (i, name) in ["kine", "kube-apiserver"].iter().enumerate() {
                if let Ok(Some(status)) = self.children[i].try_wait() {
                    let log = self.log(name);
                    let tail: String = log.lines().rev().take(15).collect::<Vec<_>>().join("\n");
                    panic!("{name} exited ({status}) before the API was ready:\n{tail}");
                }
            }
            let ok = Command::new("curl")
                .args(["-skf", "-o", "/dev/null", "-H"])
                .arg(format!("Authorization: Bearer {TOKEN}"))
                .arg(format!("{}/readyz", self.url))
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if ok {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!(
            "kube-apiserver not ready within 90 s; its log ends:\n{}",
            self.log("kube-apiserver")
        );
    }

    /// A `kind: Cluster` document for this control plane.
    pub fn cluster_doc(&self, name: &str) -> String {
        format!(
            "apiVersion: poolwright/v1\nkind: Cluster\nmetadata: {{name: {name}}}\nspec:\n  kubeconfig: {}\n",
            self.kubeconfig.display()
        )
    }

    pub async fn client(&self) -> kube::Client {
        let kc = kube::config::Kubeconfig::read_from(&self.kubeconfig).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .unwrap();
        kube::Client::try_from(config).unwrap()
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        for c in self.children.iter_mut().rev() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
