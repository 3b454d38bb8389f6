//! Schema: validates a parsed TOML tree and builds the [`Config`] model.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use super::toml::{join_key, Item, Table, Val};
use super::*;

const ROOT_KEYS: &[&str] = &["runtime_dir", "network", "escalation", "images", "profiles"];
const IMAGE_KEYS: &[&str] = &["base", "packages", "run"];
const NETWORK_KEYS: &[&str] = &["default_deny", "hosts"];
const ESCALATION_KEYS: &[&str] = &["enabled", "auto_approve", "prompt_timeout_s"];
const RULE_KEYS: &[&str] = &["argv", "allow_trailing_args", "trailing_args", "cwd", "harden_git"];
const PROFILE_KEYS: &[&str] = &[
    "image",
    "command",
    "persist",
    "volumes",
    "env",
    "pass_env",
    "ports",
    "isolate_ignored",
    "ipv6",
    "network",
    "caps",
    "git_identity",
    "limits",
    "user",
    "host_config",
    "host_config_writable",
    "host_hooks",
    "ca_certs",
    "secrets",
    "ssh_agent",
];
const PROFILE_LIMITS_KEYS: &[&str] = &["memory", "pids", "cpus", "disk", "image_layer"];
const PROFILE_NETWORK_KEYS: &[&str] = &["allow", "deny", "dns", "mode", "hosts", "idle_timeout_s"];

// ---------------------------------------------------------------------------
// Schema: TOML tree -> Config
// ---------------------------------------------------------------------------

/// Validates a parsed TOML tree against the schema; holds the file for messages.
pub(super) struct Schema<'a> {
    pub(super) file: &'a Path,
}

/// Describes a value for "got ..." in messages.
fn got(val: &Val) -> String {
    match val {
        Val::Str(s) => quote(s),
        Val::Array(items) if items.is_empty() => "an empty array".into(),
        other => other.kind().into(),
    }
}

/// Debug-quotes `s`, shortened to keep messages readable.
fn quote(s: &str) -> String {
    const MAX: usize = 80;
    if s.chars().count() > MAX {
        let short: String = s.chars().take(MAX).collect();
        format!("{:?}...", short)
    } else {
        format!("{:?}", s)
    }
}

impl Schema<'_> {
    fn invalid(&self, line: usize, key: &str, expected: impl Into<String>, got: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            path: self.file.to_path_buf(),
            line,
            key: key.to_string(),
            expected: expected.into(),
            got: got.into(),
        }
    }

    /// Rejects keys of `table` outside `allowed`.
    fn known_keys(&self, table: &Table, key: &str, allowed: &'static [&'static str]) -> Result<(), ConfigError> {
        super::known_keys(self.file, table, key, allowed)
    }

    fn table<'t>(&self, item: &'t Item, key: &str) -> Result<&'t Table, ConfigError> {
        match &item.val {
            Val::Table(t) => Ok(t),
            other => Err(self.invalid(item.line, key, "a table", got(other))),
        }
    }

    fn boolean(&self, item: &Item, key: &str) -> Result<bool, ConfigError> {
        match &item.val {
            Val::Bool(b) => Ok(*b),
            other => Err(self.invalid(item.line, key, "a boolean (true or false)", got(other))),
        }
    }

    /// A string; NUL characters are never valid in paths, argv or env.
    fn string<'t>(&self, item: &'t Item, key: &str, expected: &str) -> Result<&'t str, ConfigError> {
        match &item.val {
            Val::Str(s) if s.contains('\0') => {
                Err(self.invalid(item.line, key, "a string without NUL characters", quote(s)))
            }
            Val::Str(s) => Ok(s),
            other => Err(self.invalid(item.line, key, expected, got(other))),
        }
    }

    /// An array of strings, each with its line.
    fn strings<'t>(&self, item: &'t Item, key: &str, expected: &str) -> Result<Vec<(usize, &'t str)>, ConfigError> {
        let items = match &item.val {
            Val::Array(items) => items,
            other => return Err(self.invalid(item.line, key, expected, got(other))),
        };
        items
            .iter()
            .map(|i| Ok((i.line, self.string(i, key, expected)?)))
            .collect()
    }

    fn absolute_path(&self, item: &Item, key: &str) -> Result<PathBuf, ConfigError> {
        let s = self.string(item, key, "an absolute path")?;
        if !s.starts_with('/') {
            return Err(self.invalid(item.line, key, "an absolute path", quote(s)));
        }
        Ok(PathBuf::from(s))
    }

    /// A list of prefixes with no duplicates and no overlaps.
    fn prefixes(&self, item: &Item, key: &str) -> Result<Vec<Prefix>, ConfigError> {
        const EXPECTED: &str = "an array of CIDR prefixes like \"10.0.0.0/8\" or \"fd00::/8\"";
        let mut out: Vec<(usize, Prefix)> = Vec::new();
        for (line, s) in self.strings(item, key, EXPECTED)? {
            let p: Prefix = s
                .parse()
                .map_err(|e: ValueError| self.invalid(line, key, e.to_string(), quote(s)))?;
            for (first_line, q) in &out {
                if *q == p {
                    return Err(ConfigError::Duplicate {
                        path: self.file.to_path_buf(),
                        line,
                        first_line: *first_line,
                        key: key.to_string(),
                        value: quote(&p.to_string()),
                    });
                }
                if q.overlaps(&p) {
                    return Err(ConfigError::Overlap {
                        path: self.file.to_path_buf(),
                        line,
                        first_line: *first_line,
                        key: key.to_string(),
                        first: quote(&q.to_string()),
                        second: quote(&p.to_string()),
                    });
                }
            }
            out.push((line, p));
        }
        Ok(out.into_iter().map(|(_, p)| p).collect())
    }

    pub(super) fn config(&self, root: &Table) -> Result<Config, ConfigError> {
        self.known_keys(root, "", ROOT_KEYS)?;
        let mut cfg = Config::builtin(self.file);
        cfg.exists = true;
        let mut global_hosts = Vec::new();
        if let Some(item) = root.get("runtime_dir") {
            cfg.runtime_dir = Some(self.absolute_path(item, "runtime_dir")?);
        }
        if let Some(item) = root.get("network") {
            let t = self.table(item, "network")?;
            self.known_keys(t, "network", NETWORK_KEYS)?;
            if let Some(dd) = t.get("default_deny") {
                cfg.default_deny = Some(self.prefixes(dd, "network.default_deny")?);
            }
            if let Some(h) = t.get("hosts") {
                global_hosts = self.hosts(h, "network.hosts")?;
            }
        }
        if let Some(item) = root.get("escalation") {
            cfg.escalation = self.escalation(item)?;
        }
        if let Some(item) = root.get("images") {
            let t = self.table(item, "images")?;
            for (name, iitem) in &t.entries {
                let key = join_key("images", name);
                if !valid_image_name(name) {
                    return Err(self.invalid(
                        iitem.line,
                        &key,
                        "an image name matching [a-z0-9][a-z0-9_.-]{0,63}, not \"default\"",
                        quote(name),
                    ));
                }
                let recipe = self.recipe(iitem, &key)?;
                cfg.images.insert(name.clone(), recipe);
            }
            // `base = "NAME"` names a recipe (or the default image), and
            // following the bases ends at a debootstrap.
            for (name, iitem) in &t.entries {
                let line = self
                    .table(iitem, &join_key("images", name))?
                    .get("base")
                    .map_or(iitem.line, |i| i.line);
                let mut seen = vec![name.as_str()];
                let mut at = cfg.images.get(name).and_then(|r| r.from.as_deref());
                while let Some(b) = at {
                    if b == "default" {
                        break;
                    }
                    let key = join_key(&join_key("images", name), "base");
                    if !cfg.images.contains_key(b) {
                        return Err(self.invalid(
                            line,
                            &key,
                            format!(
                                "\"default\" or an image recipe defined as [images.NAME] (known: {})",
                                cfg.images.keys().cloned().collect::<Vec<_>>().join(", ")
                            ),
                            quote(b),
                        ));
                    }
                    if seen.contains(&b) {
                        return Err(self.invalid(line, &key, "bases that end at a Debian suite (no cycle)", quote(b)));
                    }
                    seen.push(b);
                    at = cfg.images[b].from.as_deref();
                }
            }
        }
        // The built-in profiles get `[network] hosts` too.
        for p in cfg.profiles.values_mut() {
            *p = p.clone().with_global_hosts(&global_hosts);
        }
        if let Some(item) = root.get("profiles") {
            let t = self.table(item, "profiles")?;
            for (name, pitem) in &t.entries {
                let key = join_key("profiles", name);
                if !valid_profile_name(name) {
                    return Err(self.invalid(
                        pitem.line,
                        &key,
                        "a profile name matching [A-Za-z0-9][A-Za-z0-9_.-]{0,63}",
                        quote(name),
                    ));
                }
                // A wrong profile breaks only itself: the others, and the
                // commands that need no profile, keep working.
                let profile = self.profile(name, pitem, &key).and_then(|profile| {
                    let profile = profile.with_global_hosts(&global_hosts);
                    if let ImageSource::Named(n) = &profile.image {
                        if !cfg.images.contains_key(n) {
                            let line = self.table(pitem, &key)?.get("image").map_or(pitem.line, |i| i.line);
                            return Err(self.invalid(
                                line,
                                &join_key(&key, "image"),
                                format!(
                                    "an image recipe name defined as [images.NAME] (known: {})",
                                    cfg.images.keys().cloned().collect::<Vec<_>>().join(", ")
                                ),
                                quote(n),
                            ));
                        }
                    }
                    // A secret goes only to a name the Domain may reach.
                    crate::config::secrets::check_hosts(self.file, name, &profile.secrets, |h| {
                        crate::config::hostname::HostName::from_bytes(h.as_bytes())
                            .is_ok_and(|h| profile.hosts.iter().any(|p| p.matches_name(&h)))
                    })?;
                    Ok(profile)
                });
                match profile {
                    Ok(profile) => {
                        cfg.profiles.insert(name.clone(), profile);
                    }
                    Err(e) => {
                        cfg.profiles.remove(name);
                        cfg.broken_profiles.insert(name.clone(), e);
                    }
                }
            }
        }
        Ok(cfg)
    }

    fn escalation(&self, item: &Item) -> Result<Escalation, ConfigError> {
        let t = self.table(item, "escalation")?;
        self.known_keys(t, "escalation", ESCALATION_KEYS)?;
        let mut esc = Escalation::default();
        if let Some(i) = t.get("enabled") {
            esc.enabled = self.boolean(i, "escalation.enabled")?;
        }
        if let Some(i) = t.get("prompt_timeout_s") {
            let max = crate::escalation::MAX_PROMPT_TIMEOUT_SECS;
            let expected = format!("a whole number of seconds in 1..={max}");
            esc.prompt_timeout_s = match &i.val {
                Val::Int(n) if (1..=max as i64).contains(n) => *n as u64,
                Val::Int(n) => {
                    return Err(self.invalid(i.line, "escalation.prompt_timeout_s", expected, n.to_string()))
                }
                other => return Err(self.invalid(i.line, "escalation.prompt_timeout_s", expected, got(other))),
            };
        }
        if let Some(i) = t.get("auto_approve") {
            const EXPECTED: &str = "an array of tables ([[escalation.auto_approve]])";
            let rules = match &i.val {
                Val::TableArray(rules) | Val::Array(rules) => rules,
                other => return Err(self.invalid(i.line, "escalation.auto_approve", EXPECTED, got(other))),
            };
            for (n, rule) in rules.iter().enumerate() {
                let key = format!("escalation.auto_approve[{}]", n);
                let rt = match &rule.val {
                    Val::Table(rt) => rt,
                    other => return Err(self.invalid(rule.line, &key, EXPECTED, got(other))),
                };
                esc.auto_approve.push(self.rule(rt, rule.line, &key)?);
            }
        }
        Ok(esc)
    }

    fn rule(&self, t: &Table, line: usize, key: &str) -> Result<AutoRule, ConfigError> {
        const EXPECTED: &str = "a non-empty array of strings";
        self.known_keys(t, key, RULE_KEYS)?;
        let argv_key = format!("{}.argv", key);
        let argv_item = t
            .get("argv")
            .ok_or_else(|| self.invalid(line, &argv_key, EXPECTED, "no value"))?;
        let argv = self.strings(argv_item, &argv_key, EXPECTED)?;
        match argv.first() {
            None => return Err(self.invalid(argv_item.line, &argv_key, EXPECTED, "an empty array")),
            Some((l, "")) => {
                return Err(self.invalid(*l, &argv_key, "a non-empty program name as the first element", "\"\""))
            }
            _ => {}
        }
        let shown = || {
            let v: Vec<String> = argv.iter().map(|(_, s)| s.to_string()).collect();
            format!("argv {}", crate::escalation::quote_argv(&v))
        };
        // SR-8: a command that needs a shell, or runs the workspace's files
        // by convention, is never auto-approved.
        if let Some(why) = crate::escalation::refused_program(argv[0].1) {
            return Err(self.invalid(
                argv[0].0,
                &argv_key,
                format!("a program that runs no file of the workspace ({why})"),
                shown(),
            ));
        }
        let trailing_key = format!("{}.trailing_args", key);
        let trailing_args: Vec<String> = match t.get("trailing_args") {
            Some(i) => {
                const EXPECTED: &str =
                    "a non-empty array of non-empty patterns (`*` and `?` within one path component)";
                let pats = self.strings(i, &trailing_key, EXPECTED)?;
                if pats.is_empty() {
                    return Err(self.invalid(i.line, &trailing_key, EXPECTED, "an empty array"));
                }
                if let Some((l, _)) = pats.iter().find(|(_, p)| p.is_empty()) {
                    return Err(self.invalid(*l, &trailing_key, EXPECTED, "\"\""));
                }
                pats.into_iter().map(|(_, p)| p.to_string()).collect()
            }
            None => Vec::new(),
        };
        let allow_trailing_args = match t.get("allow_trailing_args") {
            Some(i) => {
                let allow = self.boolean(i, &format!("{}.allow_trailing_args", key))?;
                if !allow && !trailing_args.is_empty() {
                    return Err(self.invalid(
                        i.line,
                        &format!("{}.allow_trailing_args", key),
                        "true (or no value) with trailing_args patterns",
                        "false",
                    ));
                }
                allow
            }
            None => !trailing_args.is_empty(),
        };
        if allow_trailing_args {
            let at = t.get("allow_trailing_args").map_or(line, |i| i.line);
            if crate::escalation::is_git(argv[0].1) {
                if let Err(why) = crate::escalation::git_rule_subcommand_ok(
                    &argv.iter().map(|(_, s)| s.to_string()).collect::<Vec<_>>(),
                ) {
                    return Err(self.invalid(at, &argv_key, format!("a Git command that inspects ({why})"), shown()));
                }
            } else if trailing_args.is_empty() {
                return Err(self.invalid(
                    at,
                    &format!("{}.allow_trailing_args", key),
                    format!(
                        "trailing_args patterns for {} (any trailing argument could name a host file or an option \
                         that writes one; only Git's are checked by Lazaret)",
                        shown()
                    ),
                    "true without patterns",
                ));
            }
        }
        let cwd = match t.get("cwd") {
            Some(i) => {
                let ck = format!("{}.cwd", key);
                const EXPECTED: &str = "a directory relative to the workspace, without \"..\"";
                let s = self.string(i, &ck, EXPECTED)?;
                let rel = Path::new(s);
                if !rel
                    .components()
                    .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
                {
                    return Err(self.invalid(i.line, &ck, EXPECTED, quote(s)));
                }
                rel.components()
                    .filter_map(|c| match c {
                        Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
                        _ => None,
                    })
                    .collect::<Vec<_>>()
                    .join("/")
            }
            None => String::new(),
        };
        let harden_git = match t.get("harden_git") {
            Some(i) => self.boolean(i, &format!("{}.harden_git", key))?,
            None => true,
        };
        Ok(AutoRule {
            argv: argv.into_iter().map(|(_, s)| s.to_string()).collect(),
            allow_trailing_args,
            trailing_args,
            cwd,
            harden_git,
        })
    }

    /// A profile: built-in defaults overridden field by field.
    fn profile(&self, name: &str, item: &Item, key: &str) -> Result<Profile, ConfigError> {
        let t = self.table(item, key)?;
        self.known_keys(t, key, PROFILE_KEYS)?;
        let mut p = Profile::builtin(name);
        let k = |field: &str| join_key(key, field);

        if let Some(i) = t.get("image") {
            let key = k("image");
            let s = self.string(i, &key, "an image string")?;
            p.image = s
                .parse()
                .map_err(|e: ValueError| self.invalid(i.line, &key, e.to_string(), quote(s)))?;
        }
        if let Some(i) = t.get("command") {
            let key = k("command");
            const EXPECTED: &str = "a non-empty array of strings (argv)";
            let argv = self.strings(i, &key, EXPECTED)?;
            match argv.first() {
                None => return Err(self.invalid(i.line, &key, EXPECTED, "an empty array")),
                Some((l, "")) => {
                    return Err(self.invalid(*l, &key, "a non-empty program name as the first element", "\"\""))
                }
                _ => {}
            }
            p.command = argv.into_iter().map(|(_, s)| s.to_string()).collect();
        }
        if let Some(i) = t.get("persist") {
            let key = k("persist");
            let mut seen: Vec<(usize, &str)> = Vec::new();
            for (line, s) in self.strings(i, &key, "an array of absolute paths")? {
                if let Some(problem) = guest_path_problem(s) {
                    return Err(self.invalid(line, &key, format!("an array of {}", problem.plural()), quote(s)));
                }
                if let Some((first_line, _)) = seen.iter().find(|(_, q)| *q == s) {
                    return Err(self.duplicate(line, *first_line, &key, s));
                }
                seen.push((line, s));
            }
            p.persist = seen.into_iter().map(|(_, s)| s.to_string()).collect();
        }
        if let Some(i) = t.get("volumes") {
            let key = k("volumes");
            const EXPECTED: &str = "an array of \"HOSTPATH:GUESTPATH[:ro|:rw]\" strings";
            let mut seen: Vec<(usize, Volume)> = Vec::new();
            for (line, s) in self.strings(i, &key, EXPECTED)? {
                let v: Volume = s
                    .parse()
                    .map_err(|e: ValueError| self.invalid(line, &key, e.to_string(), quote(s)))?;
                if let Some((first_line, _)) = seen.iter().find(|(_, w)| w.guest == v.guest) {
                    return Err(self.duplicate(line, *first_line, &key, &format!("guest path {}", v.guest)));
                }
                seen.push((line, v));
            }
            p.volumes = seen.into_iter().map(|(_, v)| v).collect();
        }
        if let Some(i) = t.get("env") {
            let key = k("env");
            let et = self.table(i, &key)?;
            let mut env = BTreeMap::new();
            for (name, vi) in &et.entries {
                let vkey = join_key(&key, name);
                if !valid_env_name(name) {
                    return Err(self.invalid(
                        vi.line,
                        &vkey,
                        "an environment variable name matching [A-Za-z_][A-Za-z0-9_]*",
                        quote(name),
                    ));
                }
                let value = self.string(vi, &vkey, "a string")?;
                env.insert(name.clone(), value.to_string());
            }
            p.env = env.into_iter().collect();
        }
        if let Some(i) = t.get("pass_env") {
            p.pass_env = self.pass_env(i, &k("pass_env"))?;
        }
        if let Some(i) = t.get("ports") {
            let key = k("ports");
            const EXPECTED: &str = "an array of \"[ADDR:]HOSTPORT:GUESTPORT\" strings";
            let mut seen: Vec<(usize, crate::config::ports::PortForward)> = Vec::new();
            for (line, s) in self.strings(i, &key, EXPECTED)? {
                let f: crate::config::ports::PortForward = s
                    .parse()
                    .map_err(|e: ValueError| self.invalid(line, &key, e.to_string(), quote(s)))?;
                if let Some((first_line, _)) = seen
                    .iter()
                    .find(|(_, q)| f.host != 0 && q.addr == f.addr && q.host == f.host)
                {
                    return Err(self.duplicate(line, *first_line, &key, &format!("host port {}:{}", f.addr, f.host)));
                }
                seen.push((line, f));
            }
            p.ports = seen.into_iter().map(|(_, f)| f).collect();
        }
        for name in ["host_config", "host_config_writable"] {
            if let Some(i) = t.get(name) {
                let key = k(name);
                let mut seen: Vec<String> = Vec::new();
                for (line, s) in self.strings(i, &key, "an array of workspace-relative paths")? {
                    let Some(norm) = crate::config::normalize_rel(s) else {
                        return Err(self.invalid(
                            line,
                            &key,
                            "an array of relative paths inside the workspace (no `..`, not `.git`)",
                            quote(s),
                        ));
                    };
                    if !seen.contains(&norm) {
                        seen.push(norm);
                    }
                }
                if name == "host_config" {
                    p.host_config = seen;
                } else {
                    p.host_config_writable = seen;
                }
            }
        }
        if let Some(i) = t.get("host_hooks") {
            let key = k("host_hooks");
            const MODES: &str = "\"warn\" or \"refuse\"";
            p.host_hooks = match self.string(i, &key, MODES)? {
                "warn" => HostHooks::Warn,
                "refuse" => HostHooks::Refuse,
                other => return Err(self.invalid(i.line, &key, MODES, quote(other))),
            };
        }
        if let Some(i) = t.get("isolate_ignored") {
            p.isolate_ignored = self.boolean(i, &k("isolate_ignored"))?;
        }
        if let Some(i) = t.get("ipv6") {
            p.ipv6 = self.boolean(i, &k("ipv6"))?;
        }
        if let Some(i) = t.get("network") {
            let key = k("network");
            let nt = self.table(i, &key)?;
            self.known_keys(nt, &key, PROFILE_NETWORK_KEYS)?;
            if let Some(a) = nt.get("allow") {
                p.allow = self.prefixes(a, &join_key(&key, "allow"))?;
            }
            if let Some(d) = nt.get("deny") {
                p.deny = self.prefixes(d, &join_key(&key, "deny"))?;
            }
            if let Some(d) = nt.get("dns") {
                let dkey = join_key(&key, "dns");
                p.dns = self.prefixes(d, &dkey)?;
                if let Some(bad) = p.dns.iter().find(|q| !q.addr.is_ipv4() || q.len != 32) {
                    return Err(self.invalid(
                        d.line,
                        &dkey,
                        "IPv4 host addresses like \"198.18.0.2\"",
                        quote(&bad.to_string()),
                    ));
                }
            }
            if let Some(m) = nt.get("mode") {
                let mkey = join_key(&key, "mode");
                const MODES: &str = "\"slirp\", \"none\" or \"log\"";
                let mode = self.string(m, &mkey, MODES)?;
                // Hosts settle it: `with_global_hosts`.
                p.egress =
                    EgressMode::of(mode, false).ok_or_else(|| self.invalid(m.line, &mkey, MODES, quote(mode)))?;
            }
            if let Some(h) = nt.get("hosts") {
                p.hosts = self.hosts(h, &join_key(&key, "hosts"))?;
            }
            if let Some(i) = nt.get("idle_timeout_s") {
                let ikey = join_key(&key, "idle_timeout_s");
                let max = crate::config::MAX_IDLE_TIMEOUT_S;
                let expected = format!("a whole number of seconds in 1..={max}");
                p.idle_timeout_s = match &i.val {
                    Val::Int(n) if (1..=max as i64).contains(n) => *n as u32,
                    Val::Int(n) => return Err(self.invalid(i.line, &ikey, expected, n.to_string())),
                    other => return Err(self.invalid(i.line, &ikey, expected, got(other))),
                };
            }
        }
        if let Some(i) = t.get("caps") {
            p.caps = self.caps(i, &k("caps"))?;
        }
        if let Some(i) = t.get("git_identity") {
            p.git_identity = self.boolean(i, &k("git_identity"))?;
        }
        if let Some(i) = t.get("limits") {
            p.limits = self.limits(i, &k("limits"))?;
        }
        if let Some(i) = t.get("user") {
            let key = k("user");
            const EXPECTED: &str = "a user name matching [a-z_][a-z0-9_-]{0,31}, not \"root\"";
            let name = self.string(i, &key, EXPECTED)?;
            if !valid_user_name(name) {
                return Err(self.invalid(i.line, &key, EXPECTED, quote(name)));
            }
            // The home keeps the user's logins and tools across restarts.
            let home = guest_home(name);
            if !p.persist.iter().any(|q| Path::new(&home).starts_with(q)) {
                return Err(self.invalid(
                    i.line,
                    &key,
                    format!("a user whose home {home} lies under a persist path (add \"/home\" to persist)"),
                    quote(name),
                ));
            }
            p.user = Some(name.to_string());
        }
        if let Some(i) = t.get("ca_certs") {
            let key = k("ca_certs");
            const EXPECTED: &str = "\"host\" (the host's CA bundle) or \"image\" (the image's own, the default)";
            match self.string(i, &key, EXPECTED)? {
                "image" => {}
                "host" => {
                    let bundle = crate::config::host_ca_bundle()
                        .map_err(|e| self.invalid(i.line, &key, e.to_string(), "\"host\""))?;
                    crate::config::with_host_ca(&mut p, &bundle).map_err(|guest| {
                        self.invalid(
                            i.line,
                            &key,
                            format!("no volume at {guest} (ca_certs = \"host\" binds the host's bundle there)"),
                            "\"host\"",
                        )
                    })?;
                }
                other => return Err(self.invalid(i.line, &key, EXPECTED, quote(other))),
            }
        }
        if let Some(i) = t.get("secrets") {
            let mut taken: Vec<&str> = p.env.iter().map(|(k, _)| k.as_str()).collect();
            taken.extend(p.pass_env.iter().map(String::as_str));
            p.secrets = crate::config::secrets::parse(self.file, i, &k("secrets"), &taken)?;
        }
        if let Some(i) = t.get("ssh_agent") {
            p.ssh_agent = Some(crate::config::ssh_agent::parse(self.file, i, &k("ssh_agent"))?);
        }
        Ok(p)
    }

    /// `[images.NAME]`: `base = "debian:SUITE"`, `packages = [...]`.
    fn recipe(&self, item: &Item, key: &str) -> Result<Recipe, ConfigError> {
        let t = self.table(item, key)?;
        self.known_keys(t, key, IMAGE_KEYS)?;
        let mut r = Recipe {
            suite: None,
            packages: Vec::new(),
            from: None,
            run: Vec::new(),
        };
        if let Some(i) = t.get("base") {
            let bkey = join_key(key, "base");
            const EXPECTED: &str = "\"debian:SUITE\" (a Debian suite such as bookworm) or the name of a built image \
                                    (\"default\", or a recipe such as \"dev\")";
            let s = self.string(i, &bkey, EXPECTED)?;
            match s.strip_prefix("debian:") {
                None if s == "default" || valid_image_name(s) => {
                    if key == join_key("images", s) {
                        return Err(self.invalid(i.line, &bkey, "another image than this recipe's own", quote(s)));
                    }
                    r.from = Some(s.to_string())
                }
                Some(suite)
                    if !suite.is_empty()
                        && suite.len() <= 32
                        && suite.bytes().all(|b| b.is_ascii_lowercase() || b == b'-') =>
                {
                    r.suite = Some(suite.to_string())
                }
                _ => return Err(self.invalid(i.line, &bkey, EXPECTED, quote(s))),
            }
        }
        if let Some(i) = t.get("packages") {
            let pkey = join_key(key, "packages");
            const EXPECTED: &str = "an array of Debian package names matching [a-z0-9][a-z0-9+.-]+";
            for (line, p) in self.strings(i, &pkey, EXPECTED)? {
                let b = p.as_bytes();
                let ok = b.len() >= 2
                    && b.len() <= 100
                    && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
                    && b.iter()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'+' | b'.' | b'-'));
                if !ok {
                    return Err(self.invalid(line, &pkey, EXPECTED, quote(p)));
                }
                r.packages.push(p.to_string());
            }
            r.packages.sort();
            r.packages.dedup();
        }
        if let Some(i) = t.get("run") {
            let rkey = join_key(key, "run");
            const EXPECTED: &str = "an array of non-empty shell command lines";
            for (line, step) in self.strings(i, &rkey, EXPECTED)? {
                if step.trim().is_empty() || step.contains('\0') {
                    return Err(self.invalid(line, &rkey, EXPECTED, quote(step)));
                }
                r.run.push(step.to_string());
            }
        }
        Ok(r)
    }

    /// `pass_env`: unique variable names, none of Lazaret's own.
    fn pass_env(&self, i: &Item, key: &str) -> Result<Vec<String>, ConfigError> {
        const EXPECTED: &str = "an array of environment variable names matching [A-Za-z_][A-Za-z0-9_]* (not LAZARET_*)";
        let mut seen: Vec<(usize, &str)> = Vec::new();
        for (line, name) in self.strings(i, key, EXPECTED)? {
            if !valid_env_name(name) || is_reserved_env(name) {
                return Err(self.invalid(line, key, EXPECTED, quote(name)));
            }
            if let Some((first_line, _)) = seen.iter().find(|(_, q)| *q == name) {
                return Err(self.duplicate(line, *first_line, key, name));
            }
            seen.push((line, name));
        }
        Ok(seen.into_iter().map(|(_, s)| s.to_string()).collect())
    }

    /// `caps`: names from [`DEFAULT_CAPS`], with or without `CAP_`; kept
    /// in the order of [`DEFAULT_CAPS`].
    fn caps(&self, item: &Item, key: &str) -> Result<Vec<String>, ConfigError> {
        let expected = format!(
            "an array of capabilities from: {}",
            DEFAULT_CAPS
                .iter()
                .map(|c| c.trim_start_matches("CAP_"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let mut seen: Vec<(usize, String)> = Vec::new();
        for (line, s) in self.strings(item, key, &expected)? {
            let name = format!("CAP_{}", s.trim_start_matches("CAP_").to_ascii_uppercase());
            if !DEFAULT_CAPS.contains(&name.as_str()) {
                return Err(self.invalid(line, key, expected.clone(), quote(s)));
            }
            if let Some((first_line, _)) = seen.iter().find(|(_, c)| *c == name) {
                return Err(self.duplicate(line, *first_line, key, s));
            }
            seen.push((line, name));
        }
        Ok(DEFAULT_CAPS
            .iter()
            .filter(|c| seen.iter().any(|(_, s)| s == *c))
            .map(|c| c.to_string())
            .collect())
    }

    /// `[profiles.NAME.limits]`: sizes as strings, pids an integer, cpus a number.
    fn limits(&self, item: &Item, key: &str) -> Result<Limits, ConfigError> {
        let t = self.table(item, key)?;
        self.known_keys(t, key, PROFILE_LIMITS_KEYS)?;
        let mut l = Limits::default();
        for (name, slot) in [
            ("memory", &mut l.memory),
            ("disk", &mut l.disk),
            ("image_layer", &mut l.image_layer),
        ] {
            if let Some(i) = t.get(name) {
                let k = join_key(key, name);
                let s = self.string(i, &k, "a size string like \"4GiB\"")?;
                let v = parse_size(s).map_err(|e| self.invalid(i.line, &k, e.to_string(), quote(s)))?;
                if name == "memory" && v < (64 << 20) {
                    return Err(self.invalid(i.line, &k, "at least \"64MiB\"", quote(s)));
                }
                *slot = Some(v);
            }
        }
        if let Some(i) = t.get("pids") {
            let k = join_key(key, "pids");
            l.pids = Some(match &i.val {
                Val::Int(n) if (32..=4_194_304).contains(n) => *n as u64,
                other => return Err(self.invalid(i.line, &k, "an integer between 32 and 4194304", got(other))),
            });
        }
        if let Some(i) = t.get("cpus") {
            let k = join_key(key, "cpus");
            let v = match &i.val {
                Val::Int(n) => parse_cpus(&n.to_string()),
                Val::Float(f) => parse_cpus(&f.to_string()),
                _ => Err(ValueError::Cpus),
            };
            l.cpu_millis = Some(v.map_err(|e| self.invalid(i.line, &k, e.to_string(), got(&i.val)))?);
        }
        Ok(l)
    }

    /// `hosts`: unique host patterns (`config::hosts`), each error naming
    /// the line and the pattern.
    fn hosts(&self, item: &Item, key: &str) -> Result<Vec<crate::config::hosts::HostPattern>, ConfigError> {
        const EXPECTED: &str =
            "an array of host names like \"api.example.com\", \"*.example.com\" or \"example.com:22\"";
        let mut seen: Vec<(usize, crate::config::hosts::HostPattern)> = Vec::new();
        for (line, s) in self.strings(item, key, EXPECTED)? {
            let h: crate::config::hosts::HostPattern = s
                .parse()
                .map_err(|e: crate::config::hosts::PatternError| self.invalid(line, key, e.to_string(), quote(s)))?;
            if let Some((first_line, _)) = seen.iter().find(|(_, q)| *q == h) {
                return Err(self.duplicate(line, *first_line, key, s));
            }
            seen.push((line, h));
        }
        Ok(seen.into_iter().map(|(_, h)| h).collect())
    }

    fn duplicate(&self, line: usize, first_line: usize, key: &str, value: &str) -> ConfigError {
        ConfigError::Duplicate {
            path: self.file.to_path_buf(),
            line,
            first_line,
            key: key.to_string(),
            value: quote(value),
        }
    }
}

/// `[A-Za-z0-9][A-Za-z0-9_.-]{0,63}`
pub fn valid_profile_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

/// Variables Lazaret sets in every session itself; nothing passes them.
pub fn is_reserved_env(name: &str) -> bool {
    name.starts_with("LAZARET_")
}

/// `[A-Za-z_][A-Za-z0-9_]*`
pub fn valid_env_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}
