//! A client's view is exact (REQUIREMENTS.md invariant 4): a client whose held state is corrupted is
//! detected by the periodic check and healed by a keyframe within one check period.

use std::time::Duration;

use plaza_proto::pb::server_envelope;
use plaza_proto::quant::QuantPose;
use plaza_tests::{Client, start_plaza, test_config, ws_url};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_view_is_detected_and_healed_within_one_check_period() {
    let cfg = test_config();
    let check_every = cfg.room.check_every as usize;
    let plaza = start_plaza(&cfg).await;
    let url = ws_url(&plaza);
    let mut a = Client::connect(&url).await.unwrap();
    a.join("exact").await.unwrap();
    let mut b = Client::connect(&url).await.unwrap();
    let eb = b.join("exact").await.unwrap();
    a.pump_for(Duration::from_millis(300)).await.unwrap();
    let truth = *a.decoder().get(eb).expect("a sees b");
    assert_eq!(a.frame_errors, 0);

    // Flip one entity in a's held state.
    let mut wrong = truth.pose;
    wrong.position_mm[0] += 1234;
    assert_ne!(wrong, QuantPose::default());
    assert!(a.decoder_mut().corrupt_pose(eb, wrong));
    let frames_at_corruption = a.frames.len();

    // Within one check period (plus the keyframe's round trip) the check fails, a resync goes
    // out, and a keyframe restores the truth.
    let mut healed = false;
    for _ in 0..(check_every * 2 + 10) {
        let body = a.recv().await.unwrap().expect("connection open");
        if matches!(body, server_envelope::Body::SnapshotFrame(_))
            && a.resyncs > 0
            && a.frames.last().is_some_and(|f| f.keyframe)
        {
            healed = true;
            break;
        }
    }
    assert!(healed, "a keyframe healed the view");
    assert_eq!(a.resyncs, 1, "exactly one resync");
    let frames_taken = a.frames.len() - frames_at_corruption;
    assert!(
        frames_taken <= check_every + 3,
        "healed after {frames_taken} frames (check every {check_every})"
    );
    assert_eq!(a.decoder().get(eb).map(|r| r.pose), Some(truth.pose));
    plaza.shutdown().await;
}
