//! Teardown of this generation, and recovery of a previous one that did
//! not end cleanly (only what its records prove is ours).

use super::*;

impl Coordinator {
    // ---- teardown ----------------------------------------------------------------

    /// Stops answering on the Domain socket: no client connects to this
    /// generation after this. Idempotent.
    pub(super) fn withdraw_publication(&mut self) {
        if self.listener.take().is_some() {
            let _ = std::fs::remove_file(self.paths.socket());
        }
    }

    /// Withdraw publication, end sessions, stop the sandbox through the
    /// supervisor, release ownership records, remove runtime files.
    pub(super) fn teardown(&mut self) {
        let reason = self.stop_reason.clone().unwrap_or_else(|| "stopping".into());
        log::info!("teardown: {reason}");
        // INVARIANT: publication is withdrawn before anything is stopped.
        self.withdraw_publication();
        if self.phase != Phase::Failed {
            self.phase = Phase::Stopping;
        }
        let _ = self.store.set_phase(self.generation, Phase::Stopping);
        let keys: Vec<u64> = self.sessions.keys().copied().collect();
        for k in keys {
            let conn = self.sessions[&k].conn;
            self.send(conn, &ServerMsg::Closing { reason: reason.clone() });
            self.close_session(k, None);
        }
        if let Some(mut b) = self.broker.take() {
            b.cancel_all();
        }
        // The results dir is not listable (0300); open it up to remove it.
        let mailbox = self.paths.run.join("mailbox");
        let _ = std::fs::set_permissions(
            mailbox.join("results"),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        );
        escbroker::remove_tree(&mailbox);
        for mut h in self.helpers.drain(..) {
            let _ = h.kill();
            let _ = h.wait();
        }
        if let Some(mut sup) = self.sup.take() {
            sup.lease = None; // EOF: the supervisor stops the sandbox.
            if sys::wait_deadline(&mut sup.child, Duration::from_secs(10)).is_none() {
                log::warn!("supervisor did not stop in time: killed it");
            }
        }
        if let Some(mut c) = self.cgroup.take() {
            c.remove();
        }
        if let Some(mut t) = self.trash.take() {
            t.join();
        }
        // Never assume a process vanished with its parent: check each owned
        // pid by start time and kill only an exact match.
        if let Ok(list) = self.store.unreleased() {
            for o in list.iter().filter(|o| o.generation == self.generation) {
                if o.kind == OwnedKind::RunscContainer {
                    remove_runsc_state(&self.paths.runsc_root(), &o.name);
                }
                if let (Some(pid), Some(st)) = (o.pid, o.start_time) {
                    if sys::same_process(pid, st) {
                        log::warn!("{} (pid {pid}) outlived teardown: killing it", o.name);
                        let _ = sys::kill(pid, sys::SIGKILL);
                    }
                }
                let _ = self.store.release(o.row);
            }
        }
        let _ = self.store.release_leases(self.generation);
        crate::storage::state::touch_domain(&self.paths.root);
        let _ = std::fs::remove_dir_all(self.paths.gen_dir());
        let final_phase = if self.phase == Phase::Failed {
            Phase::Failed
        } else {
            Phase::Stopped
        };
        let _ = self.store.set_phase(self.generation, final_phase);
        // Last words to clients, bounded.
        let deadline = Instant::now() + Duration::from_millis(500);
        while self.conns.values().any(|c| !c.out.is_empty()) && Instant::now() < deadline {
            let keys: Vec<u64> = self.conns.keys().copied().collect();
            for k in keys {
                self.conn_flush(k);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        self.conns.clear();
        log::info!("generation {} {final_phase}", self.generation);
    }
}

/// Recovery of a previous generation that did not end cleanly: kill only
/// processes whose pid *and* start time we recorded, then mark it.
pub(super) fn recover(store: &Store, dp: &DomainPaths) {
    let Ok(mut list) = store.unreleased() else { return };
    // Recovery order (SPEC §5): the sandbox first, then the network helper,
    // then the supervisor that held the namespaces and mounts.
    let rank = |o: &crate::storage::store::Owned| match (o.kind.as_str(), o.name.as_str()) {
        ("process", "runsc-run") => 0,
        ("runsc-container", _) => 1,
        ("process", "supervisor") => 3,
        ("process", _) => 2,
        _ => 4,
    };
    list.sort_by_key(|o| (rank(o), o.row));
    for o in &list {
        match (o.kind.as_str(), o.pid, o.start_time) {
            ("process", Some(pid), Some(st)) if sys::same_process(pid, st) => {
                log::warn!(
                    "recovery: killing leftover {} (pid {pid}) of generation {}",
                    o.name,
                    o.generation
                );
                let _ = sys::kill(pid, sys::SIGKILL);
            }
            ("process", Some(pid), Some(_)) => {
                log::info!(
                    "recovery: {} (pid {pid}) of generation {} is gone (pid absent or reused: not touched)",
                    o.name,
                    o.generation
                );
            }
            ("process", _, _) => {
                log::info!(
                    "recovery: {} of generation {} was only an intent (no pid recorded): nothing to stop",
                    o.name,
                    o.generation
                );
            }
            ("host-command", Some(pid), Some(st)) => {
                let pgid = store.owned_pgid(o.row).ok().flatten().unwrap_or(pid);
                let n = escbroker::kill_recorded(pid, st, pgid);
                if n > 0 {
                    log::warn!(
                        "recovery: killed host command {} (pid {pid}) of generation {}",
                        o.name,
                        o.generation
                    );
                }
            }
            ("runsc-container", _, _) => {
                crate::storage::cgroup::remove_leftover(&crate::storage::cgroup::detect(), &o.name);
                remove_runsc_state(&dp.runsc_root(), &o.name);
            }
            (kind, _, _) => {
                log::warn!(
                    "recovery: refusing to touch {kind} {:?} of generation {}: not a kind this lazaret owns",
                    o.name,
                    o.generation
                );
            }
        }
        let _ = store.release(o.row);
    }
    if let Ok(gens) = store.unfinished_generations() {
        for g in gens {
            let _ = store.release_leases(g);
            let _ = store.set_phase(g, Phase::Recovered);
        }
    }
    let _ = std::fs::remove_dir_all(dp.gen_dir());
    // `domain.json` temp files a dead coordinator was writing.
    if let Ok(rd) = std::fs::read_dir(&dp.root) {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().to_string();
            if crate::storage::state::is_meta_temp(&n) && e.file_type().is_ok_and(|t| t.is_file()) {
                log::info!("recovery: removing {n}");
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    // Publication temp sockets of dead generations (`hc.sock.N`).
    if let Ok(rd) = std::fs::read_dir(&dp.run) {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().to_string();
            if n.strip_prefix("hc.sock.")
                .is_some_and(|g| !g.is_empty() && g.bytes().all(|b| b.is_ascii_digit()))
            {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    match store.prune_history(KEEP_GENERATIONS) {
        Ok(0) => {}
        Ok(n) => log::info!("store: forgot {n} old generations (keeping the last {KEEP_GENERATIONS})"),
        Err(e) => log::warn!("store: pruning history: {e}"),
    }
}

/// How many generations (with their sessions) the store remembers.
pub(super) const KEEP_GENERATIONS: u64 = 100;

/// Whether `file` in a runsc root is state of container `id`: runsc names
/// them `ID_sandbox:ID.state` / `.lock` and the control socket `runsc-ID.sock`.
pub fn is_runsc_state_of(file: &str, id: &str) -> bool {
    let Some(rest) = file.strip_prefix(id).and_then(|r| r.strip_prefix('_')) else {
        return file == format!("runsc-{id}.sock");
    };
    let stem = rest.strip_suffix(".state").or_else(|| rest.strip_suffix(".lock"));
    stem.is_some_and(|s| !s.contains('/') && !s.is_empty())
}

/// Removes runsc's state for container `id` by its recorded name, only
/// regular files and sockets (never what a symlink points at).
pub(super) fn remove_runsc_state(root: &Path, id: &str) {
    // A recorded id is ours only if it has the shape we mint.
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        log::warn!("recovery: refusing runsc state of {id:?}: not a container id this lazaret mints");
        return;
    }
    let Ok(rd) = std::fs::read_dir(root) else { return };
    for e in rd.flatten() {
        let n = e.file_name().to_string_lossy().to_string();
        if !is_runsc_state_of(&n, id) {
            continue;
        }
        match e.file_type() {
            Ok(t) if t.is_file() || std::os::unix::fs::FileTypeExt::is_socket(&t) => {
                log::info!("removing runsc state {n}");
                let _ = std::fs::remove_file(e.path());
            }
            _ => log::warn!("recovery: refusing to remove {n}: not a regular file or socket"),
        }
    }
}

#[cfg(test)]
mod recovery_tests {
    use super::is_runsc_state_of;

    // Covers FR-7.
    #[test]
    fn runsc_state_is_matched_by_exact_container_id() {
        let id = "lz-0123abcd-beef";
        for ours in [
            "lz-0123abcd-beef_sandbox:lz-0123abcd-beef.state",
            "lz-0123abcd-beef_sandbox:lz-0123abcd-beef.lock",
            "runsc-lz-0123abcd-beef.sock",
        ] {
            assert!(is_runsc_state_of(ours, id), "{ours}");
        }
        for not_ours in [
            "lz-0123abcd-beef2_sandbox:lz-0123abcd-beef2.state",
            "lz-0123abcd-bee_sandbox:x.state",
            "lz-0123abcd-beef_sandbox:lz-0123abcd-beef.state.tmp",
            "lz-0123abcd-beef_.state",
            "runsc-lz-0123abcd-beef.sock.old",
            "lz-0123abcd-beef",
        ] {
            assert!(!is_runsc_state_of(not_ours, id), "{not_ours}");
        }
    }
}
