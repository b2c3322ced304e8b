//! What `doctor` asks of the systemd unit: the settings that keep a daemon
//! holding cloud credentials and a kubeconfig to itself. Pure: the unit's
//! text (with its drop-ins, in the order systemd reads them) in, findings out.

use std::collections::BTreeMap;

use super::{Finding, Verdict};

/// A unit's `[Service]` settings, the last assignment of each key winning
/// (as systemd reads a key set again; an empty value resets a list, which is
/// what the last assignment then says too).
pub fn service_settings<'a>(texts: impl IntoIterator<Item = &'a str>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for text in texts {
        let mut in_service = false;
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
                continue;
            }
            if line.starts_with('[') {
                in_service = line == "[Service]";
                continue;
            }
            if let Some((k, v)) = line.split_once('=')
                && in_service
            {
                out.insert(k.trim().to_string(), v.trim().to_string());
            }
        }
    }
    out
}

/// One required setting: the key, whether its value is good enough, and
/// what to write instead.
struct Rule {
    key: &'static str,
    good: fn(&str) -> bool,
    want: &'static str,
    why: &'static str,
}

const RULES: &[Rule] = &[
    Rule {
        key: "NoNewPrivileges",
        good: |v| v == "yes" || v == "true",
        want: "NoNewPrivileges=yes",
        why: "no setuid program can raise the daemon's rights",
    },
    Rule {
        key: "ProtectSystem",
        good: |v| v == "strict",
        want: "ProtectSystem=strict",
        why: "the whole file system is read-only but the state directory",
    },
    Rule {
        key: "ProtectHome",
        good: |v| matches!(v, "yes" | "true" | "read-only" | "tmpfs"),
        want: "ProtectHome=yes",
        why: "operators' home directories (their keys) stay invisible",
    },
    Rule {
        key: "PrivateTmp",
        good: |v| v == "yes" || v == "true",
        want: "PrivateTmp=yes",
        why: "no other user's files in /tmp can be planted for it",
    },
    Rule {
        key: "UMask",
        good: |v| u32::from_str_radix(v, 8).is_ok_and(|m| m & 0o077 == 0o077),
        want: "UMask=0077",
        why: "journals and the inventory are created readable by the daemon alone",
    },
    Rule {
        key: "CapabilityBoundingSet",
        good: |v| v.is_empty(),
        want: "CapabilityBoundingSet=",
        why: "the daemon needs no capability at all",
    },
    Rule {
        key: "SystemCallFilter",
        good: |v| !v.is_empty(),
        want: "SystemCallFilter=@system-service",
        why: "system calls a service never makes are refused",
    },
    Rule {
        key: "RestrictAddressFamilies",
        good: |v| !v.is_empty(),
        want: "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
        why: "only the sockets poolwright uses can be opened",
    },
];

/// The unit's findings: who it runs as, then each hardening rule.
pub fn check(unit: &str, settings: &BTreeMap<String, String>) -> Vec<Finding> {
    let mut out = Vec::new();
    let topic = "systemd unit";
    match settings.get("User").map(String::as_str) {
        None | Some("") | Some("root") | Some("0") => out.push(Finding::new(
            Verdict::Fail,
            topic,
            format!("{unit} runs the daemon as root"),
            Some("set User=poolwright and Group=poolwright (a system user that owns only the state directory)"),
        )),
        Some(user) => out.push(Finding::new(
            Verdict::Ok,
            topic,
            format!("{unit} runs the daemon as {user}"),
            None,
        )),
    }
    let missing: Vec<&Rule> = RULES
        .iter()
        .filter(|r| !settings.get(r.key).is_some_and(|v| (r.good)(v)))
        .collect();
    if missing.is_empty() {
        out.push(Finding::new(
            Verdict::Ok,
            topic,
            format!(
                "{unit} has the hardening poolwright expects ({})",
                RULES.iter().map(|r| r.key).collect::<Vec<_>>().join(", ")
            ),
            None,
        ));
    }
    for r in missing {
        let now = settings
            .get(r.key)
            .map_or("not set".to_string(), |v| format!("{}={v}", r.key));
        out.push(Finding::new(
            Verdict::Warn,
            topic,
            format!("{unit}: {} ({now}): without it, not {}", r.key, r.why),
            Some(r.want),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_unit_passes_every_rule() {
        let text = include_str!("../../../systemd/poolwright.service");
        let findings = check("poolwright.service", &service_settings([text]));
        assert!(
            findings.iter().all(|f| f.verdict == Verdict::Ok),
            "{findings:#?}"
        );
    }

    #[test]
    fn a_drop_in_that_weakens_the_unit_is_named_with_the_setting_to_write() {
        let text = include_str!("../../../systemd/poolwright.service");
        let drop_in = "[Service]\nUser=\nNoNewPrivileges=no\nUMask=0022\n";
        let findings = check("poolwright.service", &service_settings([text, drop_in]));
        let said: Vec<String> = findings
            .iter()
            .filter(|f| f.verdict != Verdict::Ok)
            .map(|f| format!("{} / {}", f.text, f.fix.as_deref().unwrap_or("")))
            .collect();
        assert_eq!(said.len(), 3, "{said:#?}");
        assert!(said[0].contains("as root"), "{}", said[0]);
        assert!(said[1].contains("NoNewPrivileges=no"), "{}", said[1]);
        assert!(said[1].ends_with("NoNewPrivileges=yes"), "{}", said[1]);
        assert!(said[2].contains("UMask=0022"), "{}", said[2]);
    }

    #[test]
    fn settings_outside_the_service_section_do_not_count() {
        let s = service_settings(["[Unit]\nUser=poolwright\n[Install]\nUMask=0077\n"]);
        assert!(s.is_empty(), "{s:?}");
    }
}
