//! What a package installs beside the binary, generated from the same clap
//! definitions as `--help` so neither can drift: a man page per command
//! (`poolwright.1`, `poolwright-rollout-pause.1`, ...) and the bash, zsh and
//! fish completions. `scripts/package-deb.sh` calls it (`poolwright
//! package-assets DIR`, hidden from `--help`).

use std::path::Path;

use anyhow::Context;
use clap::CommandFactory;

use super::{Cli, exit};

pub(super) fn write(dir: &Path) -> anyhow::Result<u8> {
    let man = dir.join("man");
    let completions = dir.join("completions");
    for d in [&man, &completions] {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    let mut cmd = Cli::command();
    cmd.build();
    let mut pages = 0;
    man_pages(&cmd, "poolwright", &man, &mut pages)?;
    for (shell, file) in [
        (clap_complete::Shell::Bash, "poolwright.bash"),
        (clap_complete::Shell::Zsh, "_poolwright"),
        (clap_complete::Shell::Fish, "poolwright.fish"),
    ] {
        let path = completions.join(file);
        let mut out =
            std::fs::File::create(&path).with_context(|| format!("writing {}", path.display()))?;
        clap_complete::generate(shell, &mut Cli::command(), "poolwright", &mut out);
    }
    println!(
        "{pages} man page(s) in {}, completions in {}",
        man.display(),
        completions.display()
    );
    Ok(exit::OK)
}

/// A page for `cmd` named `name`, then one for each visible subcommand.
fn man_pages(cmd: &clap::Command, name: &str, dir: &Path, pages: &mut usize) -> anyhow::Result<()> {
    let cmd = cmd.clone().name(name.to_string());
    let mut bytes = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut bytes)?;
    let path = dir.join(format!("{name}.1"));
    std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
    *pages += 1;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        if sub.get_name() == "help" {
            continue;
        }
        man_pages(sub, &format!("{name}-{}", sub.get_name()), dir, pages)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_has_a_man_page_and_every_shell_its_completions() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(write(dir.path()).unwrap(), exit::OK);
        for page in [
            "poolwright.1",
            "poolwright-plan.1",
            "poolwright-rollout-pause.1",
            "poolwright-doctor.1",
            "poolwright-init.1",
        ] {
            let text = std::fs::read_to_string(dir.path().join("man").join(page)).unwrap();
            assert!(
                text.starts_with(".ie") || text.contains(".TH"),
                "{page}: {text}"
            );
        }
        assert!(!dir.path().join("man/poolwright-package-assets.1").exists());
        let bash = std::fs::read_to_string(dir.path().join("completions/poolwright.bash")).unwrap();
        assert!(
            bash.contains("doctor"),
            "bash completions name the commands"
        );
        assert!(dir.path().join("completions/_poolwright").exists());
        assert!(dir.path().join("completions/poolwright.fish").exists());
    }
}
