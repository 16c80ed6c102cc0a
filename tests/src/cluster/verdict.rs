//! The verdicts of the fault tests: [`check_single_activation`] over the nodes' event logs,
//! and the common assertions on a load report.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use plaza_directory::Epoch;

/// What [`check_single_activation`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ActivationSummary {
    /// Rooms with at least one commit.
    pub rooms: usize,
    /// Activations (room, epoch) with at least one commit.
    pub epochs: usize,
    /// Commit lines read.
    pub commits: usize,
    /// `activate` lines read.
    pub activations: usize,
    /// Rooms whose commits came from more than one epoch (moved or reclaimed).
    pub rooms_with_several_epochs: usize,
    /// `handoff … taken` lines read.
    pub handoffs_taken: usize,
}

/// Reads node event logs (see `plaza_room_actor::EventLog`) and checks that no two epochs of a
/// room committed at once: a commit took effect somewhere in `[sent, done]`, so epochs `a < b`
/// of one room overlap provably iff some commit of `a` was sent after some commit of `b` was
/// done (`a` committed after `b` had). Returns the summary, or every violation found.
pub fn check_single_activation(paths: &[PathBuf]) -> Result<ActivationSummary, String> {
    // room → epoch → (max sent of a commit, min done of a commit)
    let mut spans: HashMap<String, BTreeMap<Epoch, (u64, u64)>> = HashMap::new();
    let mut sum = ActivationSummary::default();
    for p in paths {
        let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
        for (i, line) in text.lines().enumerate() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let bad = || format!("{}:{}: malformed line {line:?}", p.display(), i + 1);
            match f.first().copied() {
                Some("commit") if f.len() >= 5 => {
                    let epoch = parse_epoch(f[2]).ok_or_else(bad)?;
                    let sent: u64 = f[3].parse().map_err(|_| bad())?;
                    let done: u64 = f[4].parse().map_err(|_| bad())?;
                    let e = spans
                        .entry(f[1].to_owned())
                        .or_default()
                        .entry(epoch)
                        .or_insert((0, u64::MAX));
                    e.0 = e.0.max(sent);
                    e.1 = e.1.min(done);
                    sum.commits += 1;
                }
                Some("activate") => sum.activations += 1,
                Some("handoff") if f.get(3) == Some(&"taken") => sum.handoffs_taken += 1,
                Some("release" | "handoff") => {}
                _ if line.trim().is_empty() => {}
                _ => return Err(bad()),
            }
        }
    }
    let mut violations = Vec::new();
    for (room, epochs) in &spans {
        sum.rooms += 1;
        sum.epochs += epochs.len();
        if epochs.len() > 1 {
            sum.rooms_with_several_epochs += 1;
        }
        let list: Vec<(&Epoch, &(u64, u64))> = epochs.iter().collect();
        for (i, (a, (a_last_sent, _))) in list.iter().enumerate() {
            for (b, (_, b_first_done)) in &list[i + 1..] {
                if a_last_sent > b_first_done {
                    violations.push(format!(
                        "room {room}: epoch {a} committed (sent at {a_last_sent}) after epoch {b} \
                         had committed (done at {b_first_done})"
                    ));
                }
            }
        }
    }
    if violations.is_empty() {
        Ok(sum)
    } else {
        violations.sort();
        Err(violations.join("\n"))
    }
}

fn parse_epoch(s: &str) -> Option<Epoch> {
    let (era, counter) = s.split_once('.')?;
    Some(Epoch::new(era.parse().ok()?, counter.parse().ok()?))
}

/// Prints the load report's fault counters, asserts that no bot failed to connect or was lost,
/// and runs [`check_single_activation`] over `logs`; returns its summary.
pub fn assert_nothing_lost(report: &plaza_load::Report, logs: &[PathBuf]) -> ActivationSummary {
    eprintln!(
        "load: connected {} failed {} lost {} resumes {} (in session {}) close codes {:?}",
        report.bots_connected,
        report.bots_failed,
        report.bots_lost,
        report.resumes,
        report.resumes_in_session,
        report.close_codes
    );
    assert_eq!(report.bots_failed, 0, "bots failed to connect");
    assert_eq!(report.bots_lost, 0, "bots lost");
    let sum = check_single_activation(logs).unwrap();
    eprintln!("event logs: {sum:?}");
    sum
}

/// The fault tests' common verdict on a load report (issue 11): [`assert_nothing_lost`], no
/// session closed 4004 (`rate_limited`), and the bots' ping RTT p99 under 1 s through the fault
/// (the session never stops answering). Prints resume and RTT figures; returns the summary.
pub fn assert_fault_held(
    fault: &str,
    report: &plaza_load::Report,
    logs: &[PathBuf],
) -> ActivationSummary {
    eprintln!(
        "{fault}: lost {} resumes {} (in session {}) resume_ms p50 {:.0} p99 {:.0} max {:.0}; \
         ping rtt p50 {:.0} p99 {:.0} max {:.0} ms",
        report.bots_lost,
        report.resumes,
        report.resumes_in_session,
        report.resume_ms.p50,
        report.resume_ms.p99,
        report.resume_ms.max,
        report.rtt_ms.p50,
        report.rtt_ms.p99,
        report.rtt_ms.max
    );
    let sum = assert_nothing_lost(report, logs);
    assert!(
        !report.close_codes.0.contains_key("4004"),
        "{fault}: a session was closed rate_limited: {:?}",
        report.close_codes
    );
    assert!(
        report.rtt_ms.p99 < 1_000.0,
        "{fault}: ping RTT p99 {:.0} ms (max {:.0})",
        report.rtt_ms.p99,
        report.rtt_ms.max
    );
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, text: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("plaza-ev-{}-{name}", std::process::id()));
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn ordered_epochs_pass_and_interleaved_ones_fail() {
        let a = write(
            "a",
            "activate r 1.1 n1.x 100\ncommit r 1.1 100 110 register\ncommit r 1.1 200 210 renew\n\
             release r 1.1 n1.x 300\n",
        );
        let b = write(
            "b",
            "activate r 1.2 n2.x 400\nhandoff r 1.2 taken 3 400\ncommit r 1.2 400 420 register\n",
        );
        let s = check_single_activation(&[a.clone(), b.clone()]).unwrap();
        assert_eq!(s.rooms, 1);
        assert_eq!(s.epochs, 2);
        assert_eq!(s.commits, 3);
        assert_eq!(s.activations, 2);
        assert_eq!(s.rooms_with_several_epochs, 1);
        assert_eq!(s.handoffs_taken, 1);
        // The old epoch commits after the new one had: a violation.
        let late = write("late", "commit r 1.1 500 510 renew\n");
        let err = check_single_activation(&[a.clone(), b.clone(), late]).unwrap_err();
        assert!(err.contains("epoch 1.1 committed"), "{err}");
        // Overlapping uncertainty windows are not a proven overlap.
        let close = write("close", "commit r 1.1 415 430 renew\n");
        check_single_activation(&[a.clone(), b.clone(), close]).unwrap();
        let junk = write("junk", "commit r not-an-epoch 1 2 x\n");
        assert!(check_single_activation(&[junk]).is_err());
    }
}
