//! The committed shared smoothing trace (`fixtures/smoothing/trace.json`) is what this crate
//! generates and renders; the TypeScript SDK asserts the same file (test/smoothing.test.ts).

use plaza_client::SmoothingConfig;
use plaza_client::trace::{TRACE_PATH, Trace, cases, generate, replay, to_text};

fn committed() -> (String, Trace) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(TRACE_PATH);
    let text = std::fs::read_to_string(&path).expect("read the committed trace");
    let tr: Trace = serde_json::from_str(&text).expect("parse the committed trace");
    (text, tr)
}

#[test]
fn committed_trace_is_up_to_date() {
    let (text, _) = committed();
    let fresh = to_text(&generate()).expect("serialize");
    assert!(
        text == fresh,
        "{TRACE_PATH} is stale: regenerate it with `cargo run -p plaza-client --example smoothing_trace` \
         and check that the TypeScript port still agrees"
    );
}

#[test]
fn replaying_the_committed_inputs_renders_the_committed_outputs() {
    let (_, tr) = committed();
    assert_eq!(tr.cases.len(), cases().len());
    assert_eq!(
        tr.cases[0].config,
        SmoothingConfig::default(),
        "case 0 is the defaults"
    );
    for case in &tr.cases {
        let (outputs, stats) = replay(&tr, case.config);
        assert_eq!(stats, case.stats, "{}: stats", case.name);
        assert_eq!(outputs.len(), case.outputs.len());
        for (got, want) in outputs.iter().zip(&case.outputs) {
            let at = format!("{} at {:.4} s", case.name, want.now_s);
            assert_eq!(got.phase, want.phase, "{at}");
            assert_eq!(got.placed, want.placed, "{at}");
            for k in 0..3 {
                assert!(
                    (got.position[k] - want.position[k]).abs() < 1e-9,
                    "{at}: {got:?} vs {want:?}"
                );
            }
            assert!((got.yaw_deg - want.yaw_deg).abs() < 1e-9, "{at}");
            assert!((got.render_t - want.render_t).abs() < 1e-9, "{at}");
            assert_eq!(got.head.is_some(), want.head.is_some(), "{at}");
            assert_eq!(got.point_at.is_some(), want.point_at.is_some(), "{at}");
        }
    }
}

/// The trace exercises what it claims to: reordering, duplicates, a gap, a teleport, catch-up,
/// interpolation, extrapolation, and no snap but those two.
#[test]
fn trace_covers_reordering_gaps_duplicates_and_a_teleport() {
    let (_, tr) = committed();
    let ticks: Vec<u32> = tr.inputs.iter().map(|i| i.pose_tick).collect();
    assert!(
        ticks.windows(2).any(|w| w[1] < w[0]),
        "reordered deliveries"
    );
    let mut sorted = ticks.clone();
    sorted.sort_unstable();
    assert!(
        sorted.windows(2).any(|w| w[0] == w[1]),
        "duplicate deliveries"
    );
    assert!(
        sorted
            .windows(2)
            .any(|w| f64::from(w[1] - w[0]) / f64::from(tr.tick_hz) > 0.4),
        "a gap"
    );
    assert_eq!(
        tr.inputs.iter().filter(|i| i.teleport).count(),
        1,
        "one teleport"
    );
    let d = &tr.cases[0];
    assert_eq!(
        d.stats.snaps,
        [1, 0, 1, 0],
        "one teleport snap, one gap snap, nothing else"
    );
    let phases: std::collections::HashSet<_> =
        d.outputs.iter().map(|o| format!("{:?}", o.phase)).collect();
    for p in ["Cooldown", "Interpolating", "Extrapolating", "Holding"] {
        assert!(phases.contains(p), "phase {p} occurs");
    }
    // Away from the two snaps, no render step jumps more than a run at 6 m/s would in a frame
    // (plus the 5 m/s blend allowance).
    for w in d.outputs.windows(2) {
        if w[1].placed {
            continue;
        }
        let step: f64 = (0..3)
            .map(|k| (w[1].position[k] - w[0].position[k]).powi(2))
            .sum::<f64>()
            .sqrt();
        assert!(
            step < 11.0 * tr.render_step_s,
            "step {step} at {}",
            w[1].now_s
        );
    }
}
