//! The subuid and subgid checks: the user has a subordinate id range of
//! the size Lazaret maps, or the `usermod` that adds a free one.

use crate::client::doctor::check::Check;
use crate::client::doctor::target::Target;
use crate::sys::hostenv::{parse_subids, subid_owner_matches, SubidRange};

/// Size of the subordinate id range Lazaret maps (1..=65536 inside).
const SUBID_COUNT: u64 = 65536;
/// Lowest start suggested for a new subordinate range (shadow-utils' default).
const SUBID_FLOOR: u64 = 100000;
/// Highest id shadow-utils accepts (`(uid_t)-1` is reserved).
const SUBID_MAX: u64 = 4_294_967_294;

/// The user's largest single range.
fn best_subid_range<'a>(ranges: &'a [SubidRange], name: Option<&str>, uid: u32) -> Option<&'a SubidRange> {
    ranges
        .iter()
        .filter(|r| subid_owner_matches(&r.owner, name, uid))
        .max_by_key(|r| r.count)
}

/// First id after every existing range, and at least [`SUBID_FLOOR`].
pub(super) fn free_subid_start(ranges: &[SubidRange]) -> u64 {
    ranges
        .iter()
        .map(|r| r.start.saturating_add(r.count))
        .fold(SUBID_FLOOR, u64::max)
}

/// `start-end` (inclusive) for a new range of [`SUBID_COUNT`] ids, or `None`
/// when it would not fit below the highest valid id.
fn subid_range_arg(start: u64) -> Option<String> {
    let end = start.checked_add(SUBID_COUNT - 1)?;
    (end <= SUBID_MAX).then(|| format!("{start}-{end}"))
}

pub(super) fn check_subid(
    name: &'static str,
    path: &str,
    contents: Option<&str>,
    flag: &str,
    t: &Target,
    free: u64,
) -> Check {
    let fix = match subid_range_arg(free) {
        Some(range) => format!("sudo usermod {flag} {range} {}", t.arg()),
        None => format!("edit {path} by hand: no free range of {SUBID_COUNT} ids is left"),
    };
    let Some(contents) = contents else {
        return Check::fail(name, format!("{path} does not exist or is unreadable"), fix);
    };
    // The name the runtime matches by: the passwd entry of the uid.
    let owner = crate::sys::hostenv::user_name(t.uid);
    let ranges = parse_subids(contents);
    let used = crate::sys::hostenv::find_subrange(contents, owner.as_deref(), t.uid);
    let used = used.and_then(|u| ranges.iter().find(|r| (r.start, r.count) == (u.start, u.count)));
    match used.or_else(|| best_subid_range(&ranges, owner.as_deref(), t.uid)) {
        Some(r) if r.count >= SUBID_COUNT => Check::pass(
            name,
            format!(
                "{} has {}-{} ({} ids) in {path}",
                t.display(),
                r.start,
                r.start + r.count - 1,
                r.count
            ),
        ),
        Some(r) => Check::fail(
            name,
            format!(
                "largest range for {} in {path} has {} ids, need at least {SUBID_COUNT}",
                t.display(),
                r.count
            ),
            fix,
        ),
        None => Check::fail(name, format!("no range for {} in {path}", t.display()), fix),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subid_parsing_skips_junk() {
        let f = "# comment\n\nalice:100000:65536\nbroken\nbob:x:1\n1001:165536:65536\n  carol:231072:10  \n";
        assert_eq!(
            parse_subids(f),
            vec![
                SubidRange {
                    owner: "alice".into(),
                    start: 100000,
                    count: 65536
                },
                SubidRange {
                    owner: "1001".into(),
                    start: 165536,
                    count: 65536
                },
                SubidRange {
                    owner: "carol".into(),
                    start: 231072,
                    count: 10
                },
            ]
        );
    }

    #[test]
    fn subid_matching_by_name_or_uid() {
        let r = parse_subids("alice:100000:1000\n1000:200000:65536\nbob:300000:65536\n");
        let best = best_subid_range(&r, Some("alice"), 1000).unwrap();
        assert_eq!((best.start, best.count), (200000, 65536));
        let best = best_subid_range(&r, Some("alice"), 1002).unwrap();
        assert_eq!((best.start, best.count), (100000, 1000));
        assert!(best_subid_range(&r, Some("carol"), 1003).is_none());
        assert!(best_subid_range(&r, None, 1000).is_some());
        assert!(!subid_owner_matches("1000x", None, 1000));
    }

    #[test]
    fn free_range_is_past_highest_end() {
        assert_eq!(free_subid_start(&[]), 100000);
        assert_eq!(free_subid_start(&parse_subids("a:100000:65536\n")), 165536);
        assert_eq!(free_subid_start(&parse_subids("a:1000:10\n")), 100000);
        assert_eq!(
            free_subid_start(&parse_subids("a:300000:65536\nb:100000:65536\n")),
            365536
        );
        assert_eq!(subid_range_arg(165536).as_deref(), Some("165536-231071"));
        assert_eq!(subid_range_arg(100000).as_deref(), Some("100000-165535"));
        assert_eq!(subid_range_arg(SUBID_MAX), None);
    }
}
