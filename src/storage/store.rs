//! The durable store: one SQLite file per Domain Root, opened only by the
//! process that holds the Domain's exclusive lock.
//!
//! Schema changes are append-only migrations keyed by `PRAGMA user_version`;
//! a file written by a newer Lazaret fails closed. Ownership of an
//! external resource is recorded as an *intent* row before the resource is
//! created, then completed with its identity (pid + start time, container
//! id) once it exists, and marked released when it is gone.

use std::fmt;
use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use crate::domain::Generation;
use crate::wire::client::SessionId;

/// Append-only. Never edit or remove an entry; add a new one.
const MIGRATIONS: &[&str] = &[
    // 1: generations, component ids, owned resources, sessions.
    "CREATE TABLE generations (
        number INTEGER PRIMARY KEY,
        profile TEXT NOT NULL,
        workspace TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        phase TEXT NOT NULL,
        started_at INTEGER NOT NULL,
        ended_at INTEGER
    );
    CREATE TABLE components (
        generation INTEGER NOT NULL REFERENCES generations(number),
        role TEXT NOT NULL,
        id TEXT NOT NULL,
        PRIMARY KEY (generation, role, id)
    );
    CREATE TABLE owned (
        rowid INTEGER PRIMARY KEY,
        generation INTEGER NOT NULL REFERENCES generations(number),
        kind TEXT NOT NULL,
        name TEXT NOT NULL,
        pid INTEGER,
        start_time INTEGER,
        released INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        generation INTEGER NOT NULL REFERENCES generations(number),
        client_id TEXT NOT NULL,
        client_pid INTEGER NOT NULL,
        argv0 TEXT NOT NULL,
        opened_at INTEGER NOT NULL,
        closed_at INTEGER,
        exit_code INTEGER
    );",
    // 2: prepared-lower leases per generation.
    "CREATE TABLE leases (
        generation INTEGER NOT NULL REFERENCES generations(number),
        artifact TEXT NOT NULL,
        source_digest TEXT NOT NULL,
        released INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (generation, artifact)
    );",
    // 3: network readiness per generation.
    "CREATE TABLE network_readiness (
        generation INTEGER PRIMARY KEY REFERENCES generations(number),
        sidecar_id TEXT NOT NULL,
        policy_digest TEXT NOT NULL,
        netns_inode INTEGER NOT NULL,
        fingerprint TEXT NOT NULL,
        probe TEXT NOT NULL,
        recorded_at INTEGER NOT NULL
    );",
    // 4: the process group of an owned process (host commands run by the
    // escalation broker lead their own group).
    "ALTER TABLE owned ADD COLUMN pgid INTEGER;",
];

#[derive(Debug)]
pub enum StoreError {
    Open(PathBuf, rusqlite::Error),
    NewerSchema {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    /// The file is not a store this lazaret can trust: empty, damaged, or
    /// with a schema version no lazaret writes.
    Damaged {
        path: PathBuf,
        what: String,
    },
    Sql(rusqlite::Error),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            StoreError::Open(p, e) => write!(f, "cannot open store {}: {e}", p.display()),
            StoreError::NewerSchema { path, found, known } => write!(
                f,
                "store {} has schema version {found}, newer than this lazaret knows ({known}): \
                 refusing to use it; upgrade lazaret",
                path.display()
            ),
            StoreError::Damaged { path, what } => write!(
                f,
                "store {} {what}: refusing to use it; restore it from a backup, or move it aside \
                 (`mv {} {}.bad`) to start this Domain over with an empty history",
                path.display(),
                path.display(),
                path.display()
            ),
            StoreError::Sql(e) => write!(f, "store: {e}"),
        }
    }
}

impl std::error::Error for StoreError {}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Sql(e)
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// A generation's phase, stored as its word in `generations.phase`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Starting,
    Ready,
    Stopping,
    Stopped,
    Failed,
    /// Ended by a later coordinator's recovery (the previous one crashed).
    Recovered,
}

impl Phase {
    pub const ALL: [Phase; 6] = [
        Phase::Starting,
        Phase::Ready,
        Phase::Stopping,
        Phase::Stopped,
        Phase::Failed,
        Phase::Recovered,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Starting => "starting",
            Phase::Ready => "ready",
            Phase::Stopping => "stopping",
            Phase::Stopped => "stopped",
            Phase::Failed => "failed",
            Phase::Recovered => "recovered",
        }
    }

    pub fn parse(s: &str) -> Option<Phase> {
        Phase::ALL.into_iter().find(|p| p.as_str() == s)
    }

    /// The generation ended (its `ended_at` is set).
    pub fn is_end(self) -> bool {
        matches!(self, Phase::Stopped | Phase::Failed | Phase::Recovered)
    }
}

/// `Display` and `ToSql` for a type stored as its word (`as_str`).
macro_rules! stored_as_word {
    ($t:ty) => {
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl rusqlite::types::ToSql for $t {
            fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
                Ok(self.as_str().into())
            }
        }
    };
}

stored_as_word!(Phase);

/// A phase no lazaret writes is a damaged row (fail closed).
impl rusqlite::types::FromSql for Phase {
    fn column_result(v: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        let s = v.as_str()?;
        Phase::parse(s).ok_or_else(|| rusqlite::types::FromSqlError::Other(format!("unknown phase {s:?}").into()))
    }
}

/// What an `owned` row records, stored as its word in `owned.kind`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnedKind {
    /// A host process, by pid and start time.
    Process,
    /// A runsc container (its state files and cgroup), by container id.
    RunscContainer,
    /// A host command run for the sandbox, by pid, start time and group.
    HostCommand,
    /// A kind this lazaret does not write (recovery refuses to touch it).
    Other(String),
}

impl OwnedKind {
    pub fn as_str(&self) -> &str {
        match self {
            OwnedKind::Process => "process",
            OwnedKind::RunscContainer => "runsc-container",
            OwnedKind::HostCommand => "host-command",
            OwnedKind::Other(s) => s,
        }
    }

    pub fn parse(s: &str) -> OwnedKind {
        match s {
            "process" => OwnedKind::Process,
            "runsc-container" => OwnedKind::RunscContainer,
            "host-command" => OwnedKind::HostCommand,
            other => OwnedKind::Other(other.to_string()),
        }
    }
}

stored_as_word!(OwnedKind);

impl rusqlite::types::FromSql for OwnedKind {
    fn column_result(v: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        Ok(OwnedKind::parse(v.as_str()?))
    }
}

/// A generation is stored as its number (an SQLite INTEGER).
impl rusqlite::types::ToSql for Generation {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        Ok((self.get() as i64).into())
    }
}

impl rusqlite::types::FromSql for Generation {
    fn column_result(v: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        let n = v.as_i64()?;
        u64::try_from(n)
            .ok()
            .and_then(|n| Generation::new(n).ok())
            .ok_or(rusqlite::types::FromSqlError::OutOfRange(n))
    }
}

/// One owned resource that was never marked released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owned {
    pub row: i64,
    pub generation: Generation,
    pub kind: OwnedKind,
    pub name: String,
    pub pid: Option<i32>,
    pub start_time: Option<u64>,
}

pub struct Store {
    conn: Connection,
}

/// One generation's network readiness record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkReadiness {
    pub generation: u64,
    pub sidecar_id: String,
    pub policy_digest: String,
    pub netns_inode: u64,
    pub fingerprint: String,
    pub probe: String,
}

/// Checks a store file without changing it (for `lazaret state verify`):
/// absent is fine (never started); empty, damaged or of a schema version no
/// lazaret of this kind writes is an error naming the file and the fix.
pub fn check_file(path: &Path) -> Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(StoreError::Open(path.to_path_buf(), rusqlite_io(e))),
        Ok(m) if !m.is_file() => {
            return Err(StoreError::Damaged {
                path: path.to_path_buf(),
                what: "is not a regular file".into(),
            })
        }
        Ok(m) if m.len() == 0 => {
            return Err(StoreError::Damaged {
                path: path.to_path_buf(),
                what: "is empty".into(),
            })
        }
        Ok(_) => {}
    }
    let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| damaged_or_sql(path, e))?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    let store = Store { conn };
    store.check(path)?;
    let found: i64 = store
        .conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| damaged_or_sql(path, e))?;
    let known = MIGRATIONS.len() as i64;
    schema_known(path, found, known)
}

/// Builds a new, migrated store at `<path>.new` and renames it to `path`.
fn create(path: &Path) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".new");
    let tmp = PathBuf::from(tmp);
    // A leftover from a start that died half-way is this Domain's own
    // (the caller holds the Domain lock) and was never in use.
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut p = tmp.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(p));
    }
    let built = (|| {
        let conn = Connection::open(&tmp).map_err(|e| StoreError::Open(tmp.clone(), e))?;
        let mut store = Store::configure(conn, &tmp)?;
        store.migrate(&tmp)?;
        // Closing checkpoints the WAL into the file and removes it.
        store.conn.close().map_err(|(_, e)| StoreError::Open(tmp.clone(), e))?;
        let io = |e: std::io::Error| StoreError::Open(path.to_path_buf(), rusqlite_io(e));
        std::fs::File::open(&tmp).and_then(|f| f.sync_all()).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    })();
    if let Err(e) = built {
        // A full disk leaves nothing half-built behind.
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut p = tmp.as_os_str().to_owned();
            p.push(suffix);
            let _ = std::fs::remove_file(PathBuf::from(p));
        }
        return Err(e);
    }
    if let Some(dir) = path.parent() {
        let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
    }
    Ok(())
}

fn rusqlite_io(e: std::io::Error) -> rusqlite::Error {
    rusqlite::Error::ToSqlConversionFailure(Box::new(e))
}

/// A schema version this lazaret can open: not negative, not newer than
/// its own `known` (the number of migrations).
fn schema_known(path: &Path, found: i64, known: i64) -> Result<()> {
    if found < 0 {
        return Err(StoreError::Damaged {
            path: path.to_path_buf(),
            what: format!("has schema version {found}, which no lazaret writes"),
        });
    }
    if found > known {
        return Err(StoreError::NewerSchema {
            path: path.to_path_buf(),
            found,
            known,
        });
    }
    Ok(())
}

/// SQLite's "this is not a usable database" errors become [`StoreError::Damaged`].
fn damaged_or_sql(path: &Path, e: rusqlite::Error) -> StoreError {
    match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DatabaseCorrupt) | Some(rusqlite::ErrorCode::NotADatabase) => StoreError::Damaged {
            path: path.to_path_buf(),
            what: format!("is damaged ({e})"),
        },
        _ => StoreError::Open(path.to_path_buf(), e),
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

impl Store {
    /// Opens (creating if needed) and migrates the store. The caller must
    /// hold the Domain lock.
    ///
    /// A new store is built under a temporary name and renamed into place
    /// once migrated, so a file at `path` is always one a lazaret finished
    /// writing: an empty or damaged one is refused, never re-created.
    pub fn open(path: &Path) -> Result<Store> {
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.len() == 0 => {
                return Err(StoreError::Damaged {
                    path: path.to_path_buf(),
                    what: "is empty".into(),
                })
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => create(path)?,
            Err(e) => return Err(StoreError::Open(path.to_path_buf(), rusqlite_io(e))),
        }
        let conn = Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| StoreError::Open(path.to_path_buf(), e))?;
        let mut store = Store::configure(conn, path)?;
        store.check(path)?;
        store.migrate(path)?;
        Ok(store)
    }

    fn configure(conn: Connection, path: &Path) -> Result<Store> {
        let damaged = |e: rusqlite::Error| damaged_or_sql(path, e);
        conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(damaged)?;
        // WAL keeps every transaction atomic across a crash with fewer
        // fsyncs than the rollback journal; startup writes several rows.
        conn.pragma_update(None, "journal_mode", "WAL").map_err(damaged)?;
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(damaged)?;
        Ok(Store { conn })
    }

    /// Fails closed on a damaged file before anything reads a row from it.
    fn check(&self, path: &Path) -> Result<()> {
        let verdict: String = self
            .conn
            .query_row("PRAGMA quick_check(1)", [], |r| r.get(0))
            .map_err(|e| damaged_or_sql(path, e))?;
        if verdict != "ok" {
            return Err(StoreError::Damaged {
                path: path.to_path_buf(),
                what: format!("is damaged ({verdict})"),
            });
        }
        Ok(())
    }

    fn migrate(&mut self, path: &Path) -> Result<()> {
        let known = MIGRATIONS.len() as i64;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Exclusive)
            .map_err(|e| damaged_or_sql(path, e))?;
        let found: i64 = tx
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| damaged_or_sql(path, e))?;
        schema_known(path, found, known)?;
        for sql in &MIGRATIONS[found as usize..] {
            tx.execute_batch(sql).map_err(|e| damaged_or_sql(path, e))?;
        }
        tx.pragma_update(None, "user_version", known)?;
        tx.commit()?;
        Ok(())
    }

    /// Mints the next generation number and records it as Starting.
    pub fn begin_generation(&mut self, profile: &str, workspace: &str, fingerprint: &str) -> Result<Generation> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Exclusive)?;
        let last: Option<Generation> = tx.query_row("SELECT MAX(number) FROM generations", [], |r| r.get(0))?;
        let next = match last {
            None => Generation::FIRST,
            Some(g) => g.next().ok_or(rusqlite::Error::IntegralValueOutOfRange(0, i64::MAX))?,
        };
        tx.execute(
            "INSERT INTO generations (number, profile, workspace, fingerprint, phase, started_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![next, profile, workspace, fingerprint, Phase::Starting, now()],
        )?;
        tx.commit()?;
        Ok(next)
    }

    pub fn set_phase(&self, generation: Generation, phase: Phase) -> Result<()> {
        let ended = phase.is_end();
        self.conn.execute(
            "UPDATE generations SET phase = ?2, ended_at = CASE WHEN ?3 THEN ?4 ELSE ended_at END WHERE number = ?1",
            params![generation, phase, ended, now()],
        )?;
        Ok(())
    }

    #[cfg(test)] // Only tests read a phase back; the runtime only sets it.
    pub fn phase(&self, generation: Generation) -> Result<Option<Phase>> {
        Ok(self
            .conn
            .query_row("SELECT phase FROM generations WHERE number = ?1", [generation], |r| {
                r.get(0)
            })
            .optional()?)
    }

    pub fn record_component(&self, generation: Generation, role: &str, id: &str) -> Result<()> {
        self.conn.execute(
            "INSERT OR IGNORE INTO components (generation, role, id) VALUES (?1, ?2, ?3)",
            params![generation, role, id],
        )?;
        Ok(())
    }

    /// Records the intent to create `kind`/`name`; returns the row to
    /// complete with [`Store::set_owned_pid`] and release later.
    pub fn record_intent(&self, generation: Generation, kind: OwnedKind, name: &str) -> Result<i64> {
        self.conn.execute(
            "INSERT INTO owned (generation, kind, name) VALUES (?1, ?2, ?3)",
            params![generation, kind, name],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Records a process that already runs and leads its own process
    /// group, in one statement (an intent, its pid and its group).
    pub fn record_process(
        &self,
        generation: Generation,
        kind: OwnedKind,
        name: &str,
        pid: i32,
        start_time: u64,
    ) -> Result<i64> {
        self.conn.execute(
            "INSERT INTO owned (generation, kind, name, pid, start_time, pgid) VALUES (?1, ?2, ?3, ?4, ?5, ?4)",
            params![generation, kind, name, pid, start_time as i64],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    pub fn set_owned_pid(&self, row: i64, pid: i32, start_time: u64) -> Result<()> {
        self.conn.execute(
            "UPDATE owned SET pid = ?2, start_time = ?3 WHERE rowid = ?1",
            params![row, pid, start_time as i64],
        )?;
        Ok(())
    }

    pub fn owned_pgid(&self, row: i64) -> Result<Option<i32>> {
        Ok(self
            .conn
            .query_row("SELECT pgid FROM owned WHERE rowid = ?1", [row], |r| r.get(0))
            .optional()?
            .flatten())
    }

    pub fn release(&self, row: i64) -> Result<()> {
        self.conn
            .execute("UPDATE owned SET released = 1 WHERE rowid = ?1", [row])?;
        Ok(())
    }

    /// Everything recorded as owned and not yet released, oldest first.
    pub fn unreleased(&self) -> Result<Vec<Owned>> {
        let mut st = self.conn.prepare(
            "SELECT rowid, generation, kind, name, pid, start_time FROM owned WHERE released = 0 ORDER BY rowid",
        )?;
        let rows = st.query_map([], |r| {
            Ok(Owned {
                row: r.get(0)?,
                generation: r.get(1)?,
                kind: r.get(2)?,
                name: r.get(3)?,
                pid: r.get(4)?,
                start_time: r.get::<_, Option<i64>>(5)?.map(|v| v as u64),
            })
        })?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }

    /// Generations that never reached an end phase (a crash left them).
    pub fn unfinished_generations(&self) -> Result<Vec<Generation>> {
        let mut st = self
            .conn
            .prepare("SELECT number FROM generations WHERE ended_at IS NULL ORDER BY number")?;
        let rows = st.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }

    pub fn open_session(
        &self,
        generation: Generation,
        id: &SessionId,
        client_id: &str,
        client_pid: i32,
        argv0: &str,
    ) -> Result<()> {
        self.conn.execute(
            "INSERT INTO sessions (id, generation, client_id, client_pid, argv0, opened_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![id.as_str(), generation, client_id, client_pid, argv0, now()],
        )?;
        Ok(())
    }

    pub fn close_session(&self, id: &SessionId, exit_code: Option<i32>) -> Result<()> {
        self.conn.execute(
            "UPDATE sessions SET closed_at = ?2, exit_code = ?3 WHERE id = ?1",
            params![id.as_str(), now(), exit_code],
        )?;
        Ok(())
    }

    pub fn lease(&self, generation: Generation, artifact: &str, digest: &str) -> Result<()> {
        self.conn.execute(
            "INSERT OR IGNORE INTO leases (generation, artifact, source_digest) VALUES (?1, ?2, ?3)",
            params![generation, artifact, digest],
        )?;
        Ok(())
    }

    pub fn release_leases(&self, generation: Generation) -> Result<()> {
        self.conn
            .execute("UPDATE leases SET released = 1 WHERE generation = ?1", [generation])?;
        Ok(())
    }

    /// Records the generation's network readiness: the
    /// fingerprint and what it was computed from.
    pub fn record_network_readiness(&self, r: &NetworkReadiness) -> Result<()> {
        self.conn.execute(
            "INSERT OR REPLACE INTO network_readiness
             (generation, sidecar_id, policy_digest, netns_inode, fingerprint, probe, recorded_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                r.generation as i64,
                r.sidecar_id,
                r.policy_digest,
                r.netns_inode as i64,
                r.fingerprint,
                r.probe,
                now()
            ],
        )?;
        Ok(())
    }

    #[cfg(test)] // Only tests read the row back; `net show` reads the summary file.
    pub fn network_readiness(&self, generation: Generation) -> Result<Option<NetworkReadiness>> {
        Ok(self
            .conn
            .query_row(
                "SELECT generation, sidecar_id, policy_digest, netns_inode, fingerprint, probe
                 FROM network_readiness WHERE generation = ?1",
                [generation],
                |r| {
                    Ok(NetworkReadiness {
                        generation: r.get::<_, i64>(0)? as u64,
                        sidecar_id: r.get(1)?,
                        policy_digest: r.get(2)?,
                        netns_inode: r.get::<_, i64>(3)? as u64,
                        fingerprint: r.get(4)?,
                        probe: r.get(5)?,
                    })
                },
            )
            .optional()?)
    }

    /// Artifacts with a lease no generation has released yet.
    pub fn unreleased_leases(&self) -> Result<Vec<String>> {
        let mut st = self
            .conn
            .prepare("SELECT DISTINCT artifact FROM leases WHERE released = 0 ORDER BY artifact")?;
        let rows = st.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }

    /// Forgets ended generations older than the last `keep`, with their
    /// sessions, components, readiness records and released rows; returns
    /// how many generations went. Unfinished generations and anything still
    /// owned or leased stay.
    pub fn prune_history(&self, keep: u64) -> Result<usize> {
        let tx = self.conn.unchecked_transaction()?;
        let cutoff: i64 = tx.query_row(
            "SELECT COALESCE(MAX(number), 0) - ?1 FROM generations",
            [keep as i64],
            |r| r.get(0),
        )?;
        let old = "SELECT number FROM generations g WHERE number <= ?1 AND ended_at IS NOT NULL
                   AND NOT EXISTS (SELECT 1 FROM owned o WHERE o.generation = g.number AND o.released = 0)
                   AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.generation = g.number AND l.released = 0)";
        for table in ["sessions", "components", "owned", "leases", "network_readiness"] {
            tx.execute(&format!("DELETE FROM {table} WHERE generation IN ({old})"), [cutoff])?;
        }
        let n = tx.execute(&format!("DELETE FROM generations WHERE number IN ({old})"), [cutoff])?;
        tx.commit()?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gen(n: u64) -> Generation {
        Generation::new(n).unwrap()
    }

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("lazaret-store-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d.join("store.sqlite")
    }

    #[test]
    fn generations_increment_and_survive_reopen() {
        let p = scratch("gen");
        {
            let mut s = Store::open(&p).unwrap();
            assert_eq!(s.begin_generation("default", "/w", "f").unwrap(), gen(1));
            s.set_phase(gen(1), Phase::Stopped).unwrap();
        }
        let mut s = Store::open(&p).unwrap();
        assert_eq!(s.begin_generation("default", "/w", "f").unwrap(), gen(2));
        assert_eq!(s.unfinished_generations().unwrap(), vec![gen(2)]);
        assert_eq!(s.phase(gen(1)).unwrap(), Some(Phase::Stopped));
        for p in Phase::ALL {
            assert_eq!(Phase::parse(p.as_str()), Some(p));
        }
        for k in ["process", "runsc-container", "host-command", "x-future"] {
            assert_eq!(OwnedKind::parse(k).as_str(), k);
        }
    }

    #[test]
    fn a_stored_generation_that_is_not_one_is_refused() {
        let p = scratch("gen0");
        let s = Store::open(&p).unwrap();
        let read = |v: i64| s.conn.query_row("SELECT ?1", [v], |r| r.get::<_, Generation>(0));
        assert_eq!(read(3).unwrap(), gen(3));
        assert!(read(0).is_err());
        assert!(read(-1).is_err());
    }

    #[test]
    fn owned_rows_are_listed_until_released() {
        let p = scratch("owned");
        let mut s = Store::open(&p).unwrap();
        let g = s.begin_generation("default", "/w", "f").unwrap();
        let row = s.record_intent(g, OwnedKind::Process, "supervisor").unwrap();
        let list = s.unreleased().unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].pid, None, "intent is recorded before the pid exists");
        s.set_owned_pid(row, 42, 777).unwrap();
        assert_eq!(s.unreleased().unwrap()[0].start_time, Some(777));
        s.release(row).unwrap();
        assert!(s.unreleased().unwrap().is_empty());
        let hc = s.record_process(g, OwnedKind::HostCommand, "req-1", 4242, 99).unwrap();
        let list = s.unreleased().unwrap();
        assert_eq!((list[0].pid, list[0].start_time), (Some(4242), Some(99)));
        assert_eq!(
            s.owned_pgid(hc).unwrap(),
            Some(4242),
            "a host command leads its own group"
        );
        s.release(hc).unwrap();
        assert!(s.unreleased().unwrap().is_empty());
    }

    #[test]
    fn network_readiness_is_recorded_per_generation() {
        let p = scratch("netready");
        let mut s = Store::open(&p).unwrap();
        let g = s.begin_generation("default", "/w", "f").unwrap();
        assert_eq!(s.network_readiness(g).unwrap(), None);
        let r = NetworkReadiness {
            generation: g.get(),
            sidecar_id: "sid".into(),
            policy_digest: "pd".into(),
            netns_inode: 4026532251,
            fingerprint: "fp".into(),
            probe: "ok x".into(),
        };
        s.record_network_readiness(&r).unwrap();
        drop(s);
        let s = Store::open(&p).unwrap();
        assert_eq!(s.network_readiness(g).unwrap(), Some(r));
    }

    // Covers FR-21.
    #[test]
    fn newer_schema_fails_closed() {
        let p = scratch("newer");
        {
            let c = Connection::open(&p).unwrap();
            c.pragma_update(None, "user_version", 99).unwrap();
        }
        let e = Store::open(&p).err().expect("newer schema must be refused").to_string();
        assert!(e.contains("schema version 99") && e.contains("upgrade lazaret"), "{e}");
        // Nothing was changed.
        let c = Connection::open(&p).unwrap();
        let v: i64 = c.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!(v, 99);
    }

    fn refused(p: &Path) -> String {
        match Store::open(p) {
            Ok(_) => panic!("{} must be refused", p.display()),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn hostile_schema_versions_fail_closed_with_path_and_fix() {
        for v in [-1i64, MIGRATIONS.len() as i64 + 1, 99, i32::MIN as i64] {
            let p = scratch(&format!("ver{v}"));
            {
                let c = Connection::open(&p).unwrap();
                c.pragma_update(None, "user_version", v).unwrap();
            }
            let e = refused(&p);
            assert!(e.contains(&p.display().to_string()), "{e}");
            assert!(e.contains("upgrade lazaret") || e.contains("mv "), "{e}");
        }
    }

    #[test]
    fn empty_and_damaged_stores_are_refused_not_recreated() {
        let p = scratch("empty");
        std::fs::write(&p, b"").unwrap();
        let e = refused(&p);
        assert!(e.contains("is empty") && e.contains(&p.display().to_string()), "{e}");
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 0, "left as found");

        let p = scratch("garbage");
        std::fs::write(&p, vec![0x5a; 8192]).unwrap();
        let e = refused(&p);
        assert!(e.contains("damaged") && e.contains(".bad"), "{e}");

        // A page overwritten in the middle of a real store.
        let p = scratch("page");
        {
            let mut s = Store::open(&p).unwrap();
            for i in 0..200 {
                let g = s.begin_generation("default", &format!("/w/{i:0100}"), "f").unwrap();
                s.set_phase(g, Phase::Stopped).unwrap();
            }
        }
        let mut bytes = std::fs::read(&p).unwrap();
        assert!(bytes.len() > 3 * 4096);
        for b in &mut bytes[4096..2 * 4096] {
            *b = 0xa5;
        }
        std::fs::write(&p, &bytes).unwrap();
        let e = refused(&p);
        assert!(e.contains("damaged") && e.contains(&p.display().to_string()), "{e}");
    }

    #[test]
    fn a_new_store_appears_only_complete() {
        let p = scratch("fresh");
        let mut tmp = p.as_os_str().to_owned();
        tmp.push(".new");
        std::fs::write(PathBuf::from(&tmp), b"half-written").unwrap();
        drop(Store::open(&p).unwrap());
        assert!(!PathBuf::from(&tmp).exists());
        assert!(std::fs::metadata(&p).unwrap().len() > 0);
    }

    #[test]
    fn history_is_bounded_and_keeps_what_is_still_owned() {
        let p = scratch("history");
        let mut s = Store::open(&p).unwrap();
        for i in 1..=150u64 {
            let g = s.begin_generation("default", "/w", "f").unwrap();
            let sid = SessionId::parse(&format!("{i:016x}")).unwrap();
            s.open_session(g, &sid, "c", 1, "sh").unwrap();
            s.close_session(&sid, Some(0)).unwrap();
            let row = s.record_intent(g, OwnedKind::Process, "supervisor").unwrap();
            if i != 10 {
                s.release(row).unwrap();
                s.set_phase(g, Phase::Stopped).unwrap();
            }
        }
        assert_eq!(s.prune_history(100).unwrap(), 49);
        let count = |sql: &str| -> i64 { s.conn.query_row(sql, [], |r| r.get(0)).unwrap() };
        assert_eq!(count("SELECT COUNT(*) FROM generations"), 101);
        assert_eq!(count("SELECT COUNT(*) FROM sessions"), 101);
        assert_eq!(
            count("SELECT MIN(number) FROM generations"),
            10,
            "still-owned generation kept"
        );
        assert_eq!(
            s.begin_generation("default", "/w", "f").unwrap(),
            gen(151),
            "numbers never reused"
        );
        assert_eq!(s.prune_history(100).unwrap(), 1, "one more generation, one fewer kept");
    }
}
