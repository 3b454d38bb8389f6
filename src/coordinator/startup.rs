//! Startup of a Domain generation: lock held → store → recover leftovers →
//! generation and ids → lower → bundle → supervisor → ready → publish.

use super::teardown::recover;
use super::*;
use crate::wire::guest::UserOutcome;

/// What init does at boot (`wire::guest::BootCmd` frames), in the
/// generation dir: the supervisor gives it to `runsc run` as stdin.
const BOOT_REQUEST_FILE: &str = "boot-request";

impl Coordinator {
    pub(super) fn start(args: &Args, report: &mut Reporter) -> Result<Coordinator, CoordinatorError> {
        let cfg = config::load(&args.config)?;
        crate::trace::step("coordinator", "config read");
        let profile = cfg.profile(&args.profile)?.clone();
        let net = NetRole::new(&cfg, &profile)?;
        let ports = crate::config::ports::merge(&profile.ports, &args.publish)?;
        if !ports.is_empty() && !profile.egress.networked() {
            return Err(CoordinatorError::PortsWithoutNetwork {
                profile: profile.name.clone(),
            });
        }
        let limits = crate::storage::cgroup::apply_overrides(profile.limits, &args.limits);
        let limits = crate::storage::cgroup::Effective::for_host(&limits);
        let profile_for_fp = profile.clone();
        let storage = paths::storage_root()?;
        let runtime = paths::runtime_root(cfg.runtime_dir.as_deref());
        let domain_id = domain::domain_id(&profile.name, &args.workspace);
        let dp = DomainPaths::new(&storage, &runtime, &domain_id);
        dp.ensure()?;
        let mut store = match Store::open(&dp.store()) {
            Ok(s) => s,
            Err(e) => {
                // A Domain root that never got a store (a full disk) is not
                // left behind as an empty, nameless Domain.
                let _ = std::fs::remove_dir(&dp.root);
                return Err(CoordinatorError::OpenStore(e));
            }
        };
        crate::trace::step("coordinator", "store opened");
        recover(&store, &dp);
        crate::trace::step("coordinator", "leftovers recovered");

        let generation =
            store.begin_generation(&profile.name, &args.workspace.to_string_lossy(), &profile.fingerprint())?;
        let coordinator_id = random_id(8);
        let sandbox_id = format!("lz-{}-{}", domain_id.short(), random_id(4));
        store.record_component(generation, "session-coordinator", &coordinator_id)?;
        store.record_component(generation, "agent-sandbox", &sandbox_id)?;
        log::info!("domain {domain_id} generation {generation} coordinator {coordinator_id}");

        let signals = sys::signal_pipe(&[sys::SIGCHLD, sys::SIGTERM, sys::SIGINT, sys::SIGHUP])
            .map_err(CoordinatorError::SignalPipe)?;
        let mut hc = Coordinator {
            domain_id,
            profile,
            workspace: args.workspace.clone(),
            guest_workspace: plan::GUEST_WORKSPACE.into(),
            runsc_args: plan::runsc_global_args(&dp.runsc_root()),
            paths: dp,
            store,
            generation,
            coordinator_id,
            sandbox_id,
            sup: None,
            runsc_pid: 0,
            runsc_start: 0,
            user_report: None,
            owned_rows: Vec::new(),
            listener: None,
            signals,
            conns: HashMap::new(),
            sessions: HashMap::new(),
            helpers: Vec::new(),
            trash: None,
            next_key: 1,
            had_session: false,
            published_at: Instant::now(),
            stop_reason: None,
            phase: Phase::Starting,
            escalation: cfg.escalation.clone(),
            broker: None,
            ssh: None,
            host_tokens: Vec::new(),
            net,
            ports,
            limits,
            cgroup: None,
            join_fp: config::join_fingerprint(&cfg, &profile_for_fp),
            esc_deadlines: HashMap::new(),
            host_rows: HashMap::new(),
            egress: Default::default(),
            gate_secrets: None,
            secret_env: Vec::new(),
        };
        // The values arrived on the secrets pipe; each secret of the
        // profile needs its own (fail closed).
        let values = secrets::match_values(&hc.profile, &args.secret_values, &hc.paths.root, hc.domain_id.as_str())?;
        if let Err(e) = hc.bring_up(&storage, values, report) {
            hc.teardown();
            return Err(e);
        }
        Ok(hc)
    }

    pub(super) fn bring_up(
        &mut self,
        storage: &Path,
        values: Vec<crate::net::subst::Binding>,
        report: &mut Reporter,
    ) -> Result<(), CoordinatorError> {
        // Git reads the host's identity while the generation is planned.
        let mut git_identity = self
            .profile
            .git_identity
            .then(crate::plan::guest::HostGitIdentity::start);
        report.progress("preparing image");
        let mut quiet = image::Progress::new(true);
        let (layout, tag) = image::resolve(storage, &self.profile.image, &mut quiet)?;
        crate::trace::step("coordinator", "image resolved");
        // INVARIANT: the lease is recorded before the lower is used, so GC
        // never reclaims an artifact a generation depends on. The lowers
        // lock (shared) keeps `image prune` out until the artifact is named
        // in domain.json and leased.
        let gc = crate::storage::gc::lock_shared(storage)?;
        let digest = image::manifest_digest(&layout, &tag)?;
        let artifact = image::artifact_id(&digest);
        crate::storage::state::record_domain(
            &self.paths.root,
            &self.domain_id,
            &self.profile,
            &self.workspace,
            &artifact,
            &digest,
        )
        .map_err(CoordinatorError::RecordDomain)?;
        self.store.lease(self.generation, &artifact, &digest)?;
        crate::trace::step("coordinator", "lease recorded");
        let bound = crate::storage::layercheck::Bound {
            floor: self
                .profile
                .limits
                .image_layer
                .unwrap_or(crate::storage::layercheck::DEFAULT_FLOOR),
            ..Default::default()
        };
        // The first start of an image unpacks it: its steps, time and
        // estimate go to the starting CLI's progress line.
        let mut send = |step: &str| report.progress(step);
        let mut forward = image::Progress::forward(&mut send);
        let lower = image::prepare_bounded(storage, &layout, &tag, &mut forward, bound)?;
        drop(forward);
        drop(gc);
        crate::trace::step("coordinator", "lower prepared");

        report.progress("starting sandbox");
        let gen_dir = self.paths.gen_dir();
        let _ = std::fs::remove_dir_all(&gen_dir);
        std::fs::create_dir_all(gen_dir.join("bundle")).map_err(|e| CoordinatorError::GenDir(gen_dir.clone(), e))?;
        let runsc_root = self.paths.runsc_root();
        std::fs::create_dir_all(&runsc_root).map_err(|e| CoordinatorError::RunscRoot(runsc_root.clone(), e))?;
        let exe = std::env::current_exe().map_err(CoordinatorError::LocateExe)?;
        let init = crate::build_info::helper_binary(&exe, "lazaret-init");
        if !init.is_file() {
            return Err(CoordinatorError::Missing(init));
        }
        self.net.prepare(&self.store, self.generation, &gen_dir)?;
        crate::trace::step("coordinator", "network planned");
        // The State Anchor: one persistent overlay per `persist` path.
        let mut binds = crate::storage::anchor::prepare_generation(
            &self.paths.root,
            &gen_dir,
            &lower.rootfs(),
            &self.profile.persist,
        )?;
        binds.extend(self.net.binds());
        crate::trace::step("coordinator", "state anchor planned");
        // The profile's volumes (over any persistent path they lie under),
        // and the host's Git identity as read-only system config.
        crate::plan::guest::check_volume_targets(&lower.rootfs(), &self.profile.volumes, &self.profile.persist)?;
        // Issue 31: the Trust Anchor issues the gate's leaves; the guest
        // trusts its CA through a bundle bound over the image's.
        let mut anchor = None;
        if !values.is_empty() {
            let a = TrustAnchor::new(self.domain_id.as_str(), self.generation.get(), &self.profile.name)?;
            binds.push(self.prepare_secrets(&a, values, &lower.rootfs(), &gen_dir)?);
            anchor = Some(a);
        }
        let mut volume_views = Vec::new();
        for mut b in crate::plan::guest::volume_binds(&self.profile.volumes) {
            // The guest bundle replaces a `ca_certs = "host"` bind (it holds
            // the host's bundle and the Domain CA).
            if self.gate_secrets.is_some() && b.guest == crate::config::GUEST_CA_BUNDLE {
                continue;
            }
            // Every read-write volume, and every volume of a profile
            // `user`, is served through a view: the view strips setuid,
            // setgid on files and world-write from what the sandbox sets
            // on host files (a plain rw bind would hand the host a setuid
            // file of the developer's) and shows the developer's files as
            // the guest user's own. A directory volume through a view of
            // it; a file volume through a view of the file's directory, of
            // which the sandbox is given that one file (a file bind: no
            // path inside leads to its siblings). Read-only volumes of a
            // profile without `user` stay plain read-only binds.
            if self.profile.user.is_some() || !b.read_only {
                let mnt = gen_dir.join(format!("view-volume-{}", volume_views.len()));
                if b.host.is_dir() {
                    volume_views.push((b.host.clone(), mnt.clone()));
                    b.host = mnt;
                } else if b.host.is_file() {
                    let (dir, name) = gitsentry::file_volume_source(&b.host)?;
                    volume_views.push((dir, mnt.clone()));
                    b.host = mnt.join(name);
                }
            }
            binds.push(b);
        }
        binds.push(
            crate::plan::guest::gitconfig_bind(&gen_dir, git_identity.take()).map_err(CoordinatorError::GitIdentity)?,
        );
        // The SSH agent's messages travel through the mailbox too (issue 51).
        if self.escalation.enabled || self.profile.ssh_agent.is_some() {
            let escalate = crate::build_info::helper_binary(&exe, "lazaret-escalate");
            if !escalate.is_file() {
                return Err(CoordinatorError::Missing(escalate));
            }
            let anchor = match anchor.take() {
                Some(a) => a,
                None => TrustAnchor::new(self.domain_id.as_str(), self.generation.get(), &self.profile.name)?,
            };
            // Role identities of this generation; their keys never leave memory.
            for (role, id) in [
                (Role::SessionCoordinator, &self.coordinator_id),
                (Role::AgentSandbox, &self.sandbox_id),
            ] {
                anchor.issue(role, id, None)?;
            }
            let broker = Broker::new(
                anchor,
                self.escalation.clone(),
                &self.workspace,
                &self.paths.run.join("mailbox"),
                &self.paths.root.join("audit.log"),
            )?;
            binds.push(plan::BindMount {
                guest: escalation::GUEST_ESCALATE.into(),
                host: escalate,
                read_only: true,
            });
            binds.push(plan::BindMount {
                guest: escalation::GUEST_REQUESTS.into(),
                host: broker.requests_dir().to_path_buf(),
                read_only: false,
            });
            binds.push(plan::BindMount {
                guest: escalation::GUEST_RESULTS.into(),
                host: broker.results_dir().to_path_buf(),
                read_only: true,
            });
            binds.push(plan::BindMount {
                guest: escalation::GUEST_KEYS.into(),
                host: broker.keys_dir().to_path_buf(),
                read_only: true,
            });
            self.broker = Some(broker);
            if let Some(cfg) = self.profile.ssh_agent.clone() {
                // The developer's agent as the starting CLI's environment named it.
                let sock = std::env::var_os("SSH_AUTH_SOCK").map(PathBuf::from);
                if sock.is_none() {
                    log::warn!("ssh-agent: SSH_AUTH_SOCK is not set: every agent request will fail");
                }
                self.ssh = Some(sshagent::SshAgentState::new(cfg, sock).map_err(CoordinatorError::Pipe)?);
            }
        }
        crate::trace::step("coordinator", "escalation planned");
        // Git Sentry and ignored state: the workspace is a FUSE view the supervisor serves.
        let views = gitsentry::prepare_views(
            &self.workspace,
            &gen_dir,
            self.profile
                .isolate_ignored
                .then(|| self.paths.ignored_dir())
                .as_deref(),
            self.profile.user.as_ref().map_or(0, |_| config::GUEST_USER_UID),
            self.profile.host_config.iter().map(PathBuf::from).collect(),
            self.profile.host_config_writable.iter().map(PathBuf::from).collect(),
        )?;
        gitsentry::add_volume_views(&gen_dir, &volume_views)?;
        crate::trace::step("coordinator", "views planned");
        binds.extend(views.binds.iter().cloned());
        let mut tmp = self.prepare_scratch(&binds)?;
        if let (Some(b), Some(_)) = (tmp.as_mut(), self.profile.limits.disk) {
            // With a disk cap, `/tmp` is served through a view that counts
            // what the sandbox writes there (`view::budget`): a storage view
            // of `scratch/tmp`, as stored, like the plain bind it replaces.
            let mnt = gen_dir.join(crate::view::budget::TMP_VIEW);
            std::fs::create_dir_all(&mnt).map_err(|e| CoordinatorError::ScratchTmp(mnt.clone(), e))?;
            b.host = mnt;
        }
        binds.extend(tmp);
        let alias = self.place_workspace(&mut binds, &gen_dir, &lower.rootfs())?;
        crate::trace::step("coordinator", "workspace placed");
        let plan = plan::SandboxPlan {
            rootfs: lower.rootfs(),
            workspace: views.workspace_source.clone(),
            workspace_guest: self.guest_workspace.clone(),
            workspace_alias: alias,
            init,
            hostname: "lazaret".into(),
            binds,
            netns: self.net.sandbox_netns(),
            caps: self.profile.caps.clone(),
            nproc: self.limits.guest_tasks(),
        };
        let bundle_config = gen_dir.join("bundle/config.json");
        std::fs::write(&bundle_config, plan::sandbox_config(&plan))
            .map_err(|e| CoordinatorError::WriteBundle(bundle_config, e))?;
        self.write_boot_request(&gen_dir, alias)?;
        crate::trace::step("coordinator", "bundle written");
        self.start_supervisor()?;
        crate::trace::step("coordinator", "supervisor ready");
        if let (Some(b), Some(sup)) = (self.broker.as_mut(), self.sup.as_ref()) {
            let requests = b.requests_dir().to_path_buf();
            b.attach(sup.child.id() as i32)
                .map_err(|e| CoordinatorError::Mailbox(requests, e))?;
        }
        report.progress("probing the network");
        self.verify_network()?;
        crate::trace::step("coordinator", "network probed");
        self.setup_user()?;
        crate::trace::step("coordinator", "user set up");
        self.forward_ports(report)?;
        let published = self.publish();
        crate::trace::step("coordinator", "published");
        published
    }

    pub(super) fn start_supervisor(&mut self) -> Result<(), CoordinatorError> {
        let (lease_rd, lease_wr) = sys::pipe().map_err(CoordinatorError::Pipe)?;
        let (status_rd, status_wr) = sys::pipe().map_err(CoordinatorError::Pipe)?;
        let exe = std::env::current_exe().map_err(CoordinatorError::LocateExe)?;
        let row = self
            .store
            .record_intent(self.generation, OwnedKind::Process, "supervisor")?;
        self.owned_rows.push(row);
        // Resource limits: the supervisor joins the generation's cgroup
        // before it execs, so runsc and the sandbox are born inside.
        self.cgroup = self.make_cgroup()?;
        let join: Vec<i32> = self.cgroup.as_ref().map(|c| c.procs_fds()).unwrap_or_default();
        let mut cmd = match self.cgroup.as_ref().and_then(|c| c.systemd_unit.clone()) {
            Some(unit) => {
                let mut c = Command::new("systemd-run");
                c.args(crate::storage::cgroup::systemd_run_args(&unit, &self.limits))
                    .arg(&exe);
                c
            }
            None => {
                let mut c = Command::new(&exe);
                c.arg0("lazaret:[supervisor]");
                c
            }
        };
        cmd.arg("__supervisor")
            .arg("--runsc-root")
            .arg(self.paths.runsc_root())
            .arg("--bundle")
            .arg(self.paths.gen_dir().join("bundle"))
            .arg("--id")
            .arg(&self.sandbox_id)
            .arg("--boot-request")
            .arg(self.paths.gen_dir().join(BOOT_REQUEST_FILE))
            .args(self.net.supervisor_args())
            .args(self.gate_secrets.as_ref().map(|_| "--secrets"))
            .arg("--views")
            .arg(self.paths.gen_dir().join("views"))
            .arg("--guest-workspace")
            .arg(&self.guest_workspace)
            .arg("--anchor-plan")
            .arg(crate::storage::anchor::plan_path(&self.paths.gen_dir()))
            .arg("--scratch")
            .arg(self.paths.root.join("scratch/overlay"))
            .args(self.meminfo_args())
            .args(self.disk_args())
            .args(self.broker.iter().flat_map(|b| {
                [
                    std::ffi::OsString::from("--mailbox-requests"),
                    b.requests_dir().as_os_str().to_owned(),
                ]
            }))
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        let (l, s) = (lease_rd.as_raw_fd(), status_wr.as_raw_fd());
        sys::ChildSetup::new()
            .reset_signals()
            .write_each(&join, b"0") // joins the generation's cgroups
            .install_fds(&[(l, supervisor::LEASE_FD), (s, supervisor::STATUS_FD)])
            .parent_death_signal(sys::SIGKILL)
            .apply(&mut cmd);
        let child = cmd.spawn().map_err(CoordinatorError::StartSupervisor)?;
        crate::trace::step("coordinator", "supervisor spawned");
        // The supervisor joined between fork and exec (or failed to start).
        if let Some(c) = self.cgroup.as_mut() {
            c.close_procs();
        }
        drop(lease_rd);
        drop(status_wr);
        let pid = child.id() as i32;
        let _ = self
            .store
            .set_owned_pid(row, pid, sys::proc_start_time(pid).unwrap_or(0));
        let mut status = StatusReceiver::new(File::from(status_rd));
        let deadline = Instant::now() + SANDBOX_START_TIMEOUT;

        // 1. The supervisor unshared its user namespace: write the id maps.
        status.wait_for_userns(deadline)?;
        write_id_maps(pid)?;
        crate::trace::step("coordinator", "id maps written");
        let ns = |n: &str| {
            let p = PathBuf::from(format!("/proc/{pid}/ns/{n}"));
            File::open(&p).map_err(|e| CoordinatorError::OpenNamespace(p, e))
        };
        let (userns, mntns) = (ns("user")?, ns("mnt")?);
        let row = self
            .store
            .record_intent(self.generation, OwnedKind::RunscContainer, &self.sandbox_id)?;
        self.owned_rows.push(row);
        if let Some(row) = self.net.record_intent(&self.store, self.generation)? {
            self.owned_rows.push(row);
        }
        crate::wire::send_fd(&lease_wr, &LeaseMsg::Mapped).map_err(CoordinatorError::LeasePipe)?;
        if let Some(g) = self.gate_secrets.take() {
            secrets::send(&lease_wr, LeaseMsg::Secrets(g)).map_err(CoordinatorError::LeasePipe)?;
        }
        crate::trace::step("coordinator", "mapped sent");
        self.sup = Some(Supervisor {
            child,
            lease: Some(lease_wr),
            status,
            userns,
            mntns,
        });

        // 2. runsc run is up and the init printed ready.
        let sup = self.sup.as_mut().unwrap();
        // The network is installed and attested before runsc starts.
        let (net, store, user) = (&mut self.net, &self.store, &mut self.user_report);
        let (rpid, rstart) = sup.status.wait_for_ready(deadline, |m| match m {
            StatusMsg::UserReady => *user = Some(UserOutcome::Ready),
            StatusMsg::UserFailed { reason } => *user = Some(UserOutcome::Failed(reason.clone())),
            m => {
                net.status_msg(m, store);
            }
        })?;
        self.runsc_pid = rpid;
        self.runsc_start = rstart;
        let row = self
            .store
            .record_intent(self.generation, OwnedKind::Process, "runsc-run")?;
        let _ = self.store.set_owned_pid(row, rpid, rstart);
        self.owned_rows.push(row);
        Ok(())
    }

    /// Non-persisted writes go to disk in the Domain Root, not to host
    /// RAM: `scratch/overlay` holds runsc's file-backed root overlay
    /// (`plan::with_scratch_overlay`), and `scratch/tmp` is bound at `/tmp`
    /// (gVisor would otherwise mount a sentry-memory tmpfs there) unless the
    /// profile already mounts something at `/tmp`. Fresh at every start:
    /// what an earlier generation left (any owner, mode, depth, count) is
    /// set aside by a rename and deleted by the state helper inside a user
    /// namespace mapped like the Domain's, never with host rights alone.
    /// What even that cannot delete stays aside (`lazaret state list`
    /// shows it) and never stops a start.
    pub(super) fn prepare_scratch(
        &mut self,
        binds: &[plan::BindMount],
    ) -> Result<Option<plan::BindMount>, CoordinatorError> {
        let dir = self.paths.root.join("scratch");
        crate::storage::statefs::set_aside(&self.paths.root, "scratch")
            .map_err(|e| CoordinatorError::SetAside(dir.clone(), e))?;
        // The last generation's scratch (and any older trash) is removed
        // while the sandbox boots; set aside, nothing of it is in the way.
        if !crate::storage::anchor::trash_on_disk(&self.paths.root).is_empty() {
            self.trash = Some(crate::storage::statefs::TrashRemoval::start(&self.paths.root));
        }
        paths::ensure_private_dir(&dir.join("overlay"))?;
        if binds.iter().any(|b| b.guest == "/tmp") || self.profile.persist.iter().any(|p| p == "/tmp") {
            return Ok(None);
        }
        let tmp = dir.join("tmp");
        std::fs::create_dir(&tmp).map_err(|e| CoordinatorError::ScratchTmp(tmp.clone(), e))?;
        // /tmp semantics inside; the Domain Root (0700) keeps others out.
        std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o1777))
            .map_err(|e| CoordinatorError::ScratchMode(tmp.clone(), e))?;
        Ok(Some(plan::BindMount {
            guest: "/tmp".into(),
            host: tmp,
            read_only: false,
        }))
    }

    /// `--disk-cap CAP --disk-used USED --disk-tmp DIR` for the supervisor
    /// when the profile caps disk: its views count the persisted paths, the
    /// ignored store and `/tmp` against the cap, from the persisted use
    /// measured now; and `--scratch-size`, the bound of the tmpfs that then
    /// holds the rest of the root filesystem's non-persisted writes.
    pub(super) fn disk_args(&self) -> Vec<std::ffi::OsString> {
        let Some(cap) = self.profile.limits.disk else {
            return Vec::new();
        };
        let used = crate::storage::cgroup::persisted_use(&self.paths.root);
        vec![
            "--scratch-size".into(),
            crate::storage::cgroup::scratch_size(cap, self.limits.memory)
                .to_string()
                .into(),
            "--disk-cap".into(),
            cap.to_string().into(),
            "--disk-used".into(),
            used.to_string().into(),
            "--disk-tmp".into(),
            self.paths.root.join("scratch/tmp").into_os_string(),
        ]
    }

    /// `--meminfo PATH` for the supervisor when the memory limit is
    /// enforced: runsc then gives the sentry that total, and the guest's
    /// `/proc/meminfo` shows the limit instead of the host's RAM.
    pub(super) fn meminfo_args(&self) -> Vec<std::ffi::OsString> {
        if self.cgroup.is_none() {
            return Vec::new();
        }
        let view = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|h| crate::storage::cgroup::meminfo_view(&h, self.limits.memory));
        let path = self.paths.gen_dir().join("meminfo");
        match view.map(|v| std::fs::write(&path, v)) {
            Some(Ok(())) => vec!["--meminfo".into(), path.into()],
            _ => {
                log::warn!("the guest will see the host's total memory: /proc/meminfo unreadable or unwritable");
                Vec::new()
            }
        }
    }

    /// The generation's cgroup with the Domain's limits; `None` (after a
    /// warning in the log) when no mechanism exists and only defaults apply.
    pub(super) fn make_cgroup(&mut self) -> Result<Option<crate::storage::cgroup::DomainCgroup>, CoordinatorError> {
        let mech = crate::storage::cgroup::detect();
        match crate::storage::cgroup::DomainCgroup::create(&mech, &self.sandbox_id, &self.limits) {
            Ok(c) => {
                log::info!("resource limits: {} via {}", self.limits.describe(), mech.describe());
                Ok(Some(c))
            }
            Err(e) if !self.limits.explicit => {
                log::warn!("running without resource limits: {e}");
                Ok(None)
            }
            Err(e) => Err(CoordinatorError::Cgroup(e)),
        }
    }

    /// "out of memory (limit 4GiB)" once the kernel OOM-killed something
    /// in the Domain's cgroup.
    /// "process limit reached (pids 200)" when forks failed at the limit
    /// and the sandbox is gone.
    pub(super) fn oom_reason(&self) -> Option<String> {
        let c = self.cgroup.as_ref()?;
        let (oom, pids) = (c.oom_kills() > 0, c.pids_max_events() > 0);
        if !oom && !pids {
            return None;
        }
        // Only when the limit took the sandbox down: runsc run is gone.
        let deadline = Instant::now() + Duration::from_secs(2);
        let gone = || {
            std::fs::read_to_string(format!("/proc/{}/stat", self.runsc_pid))
                .map(|s| {
                    s.rsplit_once(") ")
                        .is_some_and(|(_, r)| r.starts_with('Z') || r.starts_with('X'))
                })
                .unwrap_or(true)
        };
        while !gone() {
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(if oom {
            format!("out of memory (limit {})", config::format_size(self.limits.memory))
        } else {
            format!("process limit reached (pids {})", self.limits.pids)
        })
    }

    /// The one sentence for a sandbox that went away on its own: the limit
    /// it hit when the generation's cgroup counted an OOM kill or a fork
    /// refused at the pids limit, else the generic lost-sandbox sentence.
    /// Every path that reports a lost sandbox asks this, before teardown
    /// removes the cgroup.
    pub(super) fn lost_reason(&self) -> String {
        self.oom_reason().unwrap_or_else(sandbox_lost_reason)
    }

    /// FR-18/FR-20 before publication: observed readiness and the probe
    /// from inside the sandbox; records the readiness fingerprint.
    pub(super) fn verify_network(&mut self) -> Result<(), CoordinatorError> {
        let sup_pid = self.sup.as_ref().map_or(0, |s| s.child.id() as i32);
        self.net
            .verify(
                &self.store,
                &self.domain_id,
                self.generation,
                &self.profile.fingerprint(),
                sup_pid,
                self.runsc_pid,
            )
            .map_err(CoordinatorError::Network)
    }

    /// Places the workspace inside (`plan::workspace::place`, from the
    /// other mounts of the bundle in `binds`) and makes its mount point
    /// Domain-side, never in the shared image: below its persistent path,
    /// in that path's upper layer (real directories only; nothing there is
    /// followed), or in the generation's `workspaces/`, bound read-only at
    /// `/workspaces`. Returns how `/workspace` reaches it.
    fn place_workspace(
        &mut self,
        binds: &mut Vec<plan::BindMount>,
        gen_dir: &Path,
        rootfs: &Path,
    ) -> Result<plan::workspace::Alias, CoordinatorError> {
        use plan::workspace as ws;
        let persist = &self.profile.persist;
        let taken: Vec<String> = binds
            .iter()
            .map(|b| b.guest.clone())
            .filter(|g| !persist.contains(g))
            .collect();
        let home = self.profile.user.as_deref().map(config::guest_home);
        let placed = ws::place(&ws::Inputs {
            host: &self.workspace,
            persist,
            taken: &taken,
            home: home.as_deref(),
        });
        if let Some((persist, below)) = placed.mount_point_below() {
            let upper = crate::storage::anchor::anchor_dir(&self.paths.root)
                .join(crate::storage::anchor::path_key(persist))
                .join("upper");
            make_real_dirs(&upper, &below).map_err(|(p, e)| CoordinatorError::WorkspaceMountPoint(p, e))?;
        }
        if let (Some(leaf), ws::Placement::Fallback(why)) = (placed.fallback_leaf(), &placed.placement) {
            log::info!("workspace inside at {} ({why})", crate::display::escape(&placed.path));
            crate::storage::image::ensure_workspaces_dir(rootfs)?;
            let dir = gen_dir.join("workspaces");
            std::fs::create_dir_all(dir.join(leaf)).map_err(|e| CoordinatorError::GenDir(dir.clone(), e))?;
            binds.push(plan::BindMount {
                guest: ws::GUEST_WORKSPACES.into(),
                host: dir,
                read_only: true,
            });
        }
        let image = rootfs.join("workspace");
        let entry = match std::fs::symlink_metadata(&image) {
            Err(_) => ws::ImageEntry::Missing,
            Ok(m) if m.file_type().is_symlink() => ws::ImageEntry::Symlink,
            Ok(m) if m.is_dir() && std::fs::read_dir(&image).is_ok_and(|mut d| d.next().is_none()) => {
                ws::ImageEntry::EmptyDir
            }
            Ok(_) => ws::ImageEntry::Other,
        };
        self.guest_workspace = placed.path;
        Ok(ws::alias_for(entry))
    }

    /// What init does at boot, before it reports ready: `/workspace` as a
    /// symlink to the workspace (unless it is a second bind), the network
    /// probe (with a network) and the profile user's setup (with a `user`),
    /// one `BootCmd` frame each.
    fn write_boot_request(&self, gen_dir: &Path, alias: plan::workspace::Alias) -> Result<(), CoordinatorError> {
        use crate::wire::guest::BootCmd;
        use crate::wire::Message;
        let mut frames = Vec::new();
        if alias == plan::workspace::Alias::Symlink {
            let link = BootCmd::Workspace {
                path: self.guest_workspace.clone(),
            };
            frames.extend(link.encode());
        }
        if let Some(probe) = self.net.boot_request() {
            frames.extend(probe.encode());
        }
        if let Some(name) = &self.profile.user {
            let user = BootCmd::User {
                name: name.clone(),
                uid: config::GUEST_USER_UID,
            };
            frames.extend(user.encode());
        }
        let path = gen_dir.join(BOOT_REQUEST_FILE);
        std::fs::write(&path, frames).map_err(|e| CoordinatorError::WriteBundle(path, e))
    }

    /// The profile's `user`: its passwd entry and home inside (made once;
    /// both persist by default), by init at boot, before any session
    /// starts. Fails the start when init could not make it (the image's
    /// ids conflict, for example) or did not say.
    pub(super) fn setup_user(&mut self) -> Result<(), CoordinatorError> {
        let Some(name) = self.profile.user.clone() else {
            return Ok(());
        };
        // Its report came from inside the sandbox, bounded (`InitMsg`).
        let reason = match self.user_report.take() {
            Some(UserOutcome::Ready) => return Ok(()),
            Some(UserOutcome::Failed(reason)) => crate::display::escape(&format!("user {name}: {reason}")),
            None => "the guest did not report it".into(),
        };
        log::warn!("user setup failed: {reason}");
        Err(CoordinatorError::UserSetup {
            profile: self.profile.name.clone(),
            user: name,
            reason,
        })
    }

    /// Host port forwards through slirp4netns's API socket; the list goes
    /// to `gen/ports` for `net show`.
    pub(super) fn forward_ports(&mut self, report: &mut Reporter) -> Result<(), CoordinatorError> {
        if self.ports.is_empty() {
            return Ok(());
        }
        report.progress("forwarding ports");
        let gen_dir = self.paths.gen_dir();
        let (root, own) = self.holder_scope();
        self.ports = crate::config::ports::install(
            &gen_dir.join(crate::config::ports::API_SOCKET),
            &self.ports,
            // slirp4netns's own guest (10.0.2.100) is the router's tap0
            // now: forwards go to the sandbox's address, which the router
            // answers ARP for on tap0 and routes to lzr1.
            crate::net::policy::SANDBOX_ADDR,
            &|p| port_holder(&root, &own, p),
        )?;
        self.write_ports()
    }

    /// `lazaret port add`: one more forward on the running Domain (none
    /// without a network; one the Domain has already is kept as it is).
    pub(super) fn add_port(&mut self, p: crate::config::ports::PortForward) -> Result<(), CoordinatorError> {
        if !self.profile.egress.networked() {
            return Err(CoordinatorError::Ports(crate::config::ports::PortError::NoNetwork(p)));
        }
        if p.host != 0 && self.ports.contains(&p) {
            return Ok(());
        }
        // The same host port to another guest port is refused (`Twice`).
        crate::config::ports::merge(&self.ports, &[p])?;
        let (root, own) = self.holder_scope();
        let got = crate::config::ports::add(
            &self.paths.gen_dir().join(crate::config::ports::API_SOCKET),
            &p,
            crate::net::policy::SANDBOX_ADDR,
            &|q| port_holder(&root, &own, q),
        )?;
        self.ports.push(got);
        self.write_ports()
    }

    /// The runtime root other Domains' run dirs are in, and our ID.
    fn holder_scope(&self) -> (std::path::PathBuf, String) {
        let root = self.paths.run.parent().unwrap_or(Path::new("/")).to_path_buf();
        (root, self.domain_id.as_str().to_string())
    }

    /// `gen/ports` for `net show` and other Domains' collision sentences.
    fn write_ports(&self) -> Result<(), CoordinatorError> {
        let gen_dir = self.paths.gen_dir();
        let msg = crate::wire::show::ShowMsg::Ports(self.ports.clone());
        let file = gen_dir.join(crate::config::ports::PORTS_FILE);
        crate::wire::show::write(&file, &msg).map_err(|e| CoordinatorError::WritePorts(file, e))
    }

    /// Makes the generation joinable: the socket appears at its published
    /// path by rename, only now that everything is ready.
    pub(super) fn publish(&mut self) -> Result<(), CoordinatorError> {
        let sock = self.paths.socket();
        let tmp = self.paths.run.join(format!("hc.sock.{}", self.generation));
        let _ = std::fs::remove_file(&tmp);
        let _ = std::fs::remove_file(&sock);
        let l = UnixListener::bind(&tmp).map_err(|e| CoordinatorError::BindSocket(tmp.clone(), e))?;
        l.set_nonblocking(true).map_err(CoordinatorError::SocketMode)?;
        std::fs::rename(&tmp, &sock).map_err(|e| CoordinatorError::PublishSocket(sock.clone(), e))?;
        self.listener = Some(l);
        self.phase = Phase::Ready;
        self.published_at = Instant::now();
        self.store.set_phase(self.generation, Phase::Ready)?;
        log::info!("published generation {}", self.generation);
        Ok(())
    }
}

/// The running Domain (ID) whose `gen/ports` in `runtime_root` lists a
/// forward colliding with `p`, other than `own` (a published Domain only:
/// its `hc.sock` exists).
pub(super) fn port_holder(runtime_root: &Path, own: &str, p: &crate::config::ports::PortForward) -> Option<String> {
    for e in std::fs::read_dir(runtime_root).ok()?.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name == own || !crate::storage::state::is_domain_id(&name) || !e.path().join("hc.sock").exists() {
            continue;
        }
        let Ok(ports) = crate::wire::show::read_ports(&e.path().join("gen").join(crate::config::ports::PORTS_FILE))
        else {
            continue;
        };
        if ports.iter().any(|q| crate::config::ports::same_host_port(q, p)) {
            return Some(name);
        }
    }
    None
}

/// Writes the supervisor's id maps with the setuid helpers: the user is 0
/// inside, the subordinate range fills 1..=65536.
pub(super) fn write_id_maps(pid: i32) -> Result<(), CoordinatorError> {
    Ok(plan::write_id_maps(pid, 1)?)
}

/// Makes `base/names…` real directories, one level at a time: an existing
/// name must already be a directory (a symlink, file or whiteout there is
/// the failure, never followed or replaced).
fn make_real_dirs(base: &Path, names: &[&str]) -> Result<(), (PathBuf, std::io::Error)> {
    let mut cur = base.to_path_buf();
    for n in names {
        cur.push(n);
        match std::fs::create_dir(&cur) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err((cur, e)),
        }
        match std::fs::symlink_metadata(&cur) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err((cur, std::io::Error::other("not a directory"))),
            Err(e) => return Err((cur, e)),
        }
    }
    Ok(())
}
