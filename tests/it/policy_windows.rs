//! Table tests for the disruption policy's clock: window membership and the
//! next window start, across DST changes in Europe and America, midnight and
//! Sunday->Monday crossings, leap days, cron windows, several windows, and a
//! Block freeze with `until`.

use jiff::Timestamp;
use poolwright::policy::{Gate, current_window_end, gate, next_window_start};
use poolwright::spec::At;
use poolwright::spec::types::{Disruption, DisruptionPolicy, Window};
use poolwright::spec::values::{Duration, TimeOfDay, Weekday};

use Weekday::*;

fn weekly(days: &[Weekday], start: &str, minutes: u64, tz: &str) -> Window {
    Window {
        days: At::bare(days.to_vec()),
        start: Some(At::bare(TimeOfDay::parse(start).unwrap())),
        cron: None,
        duration: At::bare(Duration::secs(minutes * 60)),
        timezone: At::bare(tz.to_string()),
    }
}

fn cron(expr: &str, minutes: u64, tz: &str) -> Window {
    Window {
        days: At::bare(Weekday::ALL.to_vec()),
        start: None,
        cron: Some(At::bare(expr.to_string())),
        duration: At::bare(Duration::secs(minutes * 60)),
        timezone: At::bare(tz.to_string()),
    }
}

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

/// (name, windows, instant, inside?, end of the current window if inside)
type Membership = (
    &'static str,
    Vec<Window>,
    &'static str,
    Option<&'static str>,
);

#[test]
fn window_membership() {
    let berlin_sun_0230 = weekly(&[Sun], "02:30", 60, "Europe/Berlin");
    let ny_sun_0130 = weekly(&[Sun], "01:30", 60, "America/New_York");
    let cases: Vec<Membership> = vec![
        // Europe/Berlin springs forward on 2026-03-29 at 02:00 -> 03:00: 02:30
        // does not exist, the window opens at 03:30 CEST (01:30Z) for one real hour.
        (
            "berlin spring-forward, before",
            vec![berlin_sun_0230.clone()],
            "2026-03-29T01:29:59Z",
            None,
        ),
        (
            "berlin spring-forward, opening",
            vec![berlin_sun_0230.clone()],
            "2026-03-29T01:30:00Z",
            Some("2026-03-29T02:30:00Z"),
        ),
        (
            "berlin spring-forward, last second",
            vec![berlin_sun_0230.clone()],
            "2026-03-29T02:29:59Z",
            Some("2026-03-29T02:30:00Z"),
        ),
        (
            "berlin spring-forward, closed",
            vec![berlin_sun_0230.clone()],
            "2026-03-29T02:30:00Z",
            None,
        ),
        // Berlin falls back on 2026-10-25 at 03:00 -> 02:00: 02:30 happens twice;
        // the window opens at the first (CEST, 00:30Z) and lasts one real hour.
        (
            "berlin fall-back, first 02:30",
            vec![berlin_sun_0230.clone()],
            "2026-10-25T00:30:00Z",
            Some("2026-10-25T01:30:00Z"),
        ),
        (
            "berlin fall-back, second 02:30 is not a new window",
            vec![berlin_sun_0230.clone()],
            "2026-10-25T01:30:00Z",
            None,
        ),
        // America/New_York falls back on 2026-11-01 at 02:00 -> 01:00.
        (
            "new york fall-back, first 01:30",
            vec![ny_sun_0130.clone()],
            "2026-11-01T05:30:00Z",
            Some("2026-11-01T06:30:00Z"),
        ),
        (
            "new york fall-back, second 01:30",
            vec![ny_sun_0130.clone()],
            "2026-11-01T06:30:00Z",
            None,
        ),
        // New York springs forward on 2026-03-08 at 02:00 -> 03:00; a 4h window
        // from 00:00 EST lasts 4 real hours, to 05:00 EDT (09:00Z).
        (
            "new york spring-forward, real hours",
            vec![weekly(&[Sun], "00:00", 240, "America/New_York")],
            "2026-03-08T08:59:00Z",
            Some("2026-03-08T09:00:00Z"),
        ),
        // Crossing midnight: daily 23:00 for 3h.
        (
            "midnight crossing",
            vec![weekly(&Weekday::ALL, "23:00", 180, "UTC")],
            "2026-12-02T01:00:00Z",
            Some("2026-12-02T02:00:00Z"),
        ),
        // Crossing the week: Sunday 22:00 for 6h ends Monday 04:00.
        (
            "sunday into monday",
            vec![weekly(&[Sun], "22:00", 360, "UTC")],
            "2026-12-07T03:59:59Z",
            Some("2026-12-07T04:00:00Z"),
        ),
        (
            "sunday into monday, over",
            vec![weekly(&[Sun], "22:00", 360, "UTC")],
            "2026-12-07T04:00:00Z",
            None,
        ),
        (
            "monday is not sunday",
            vec![weekly(&[Sun], "22:00", 360, "UTC")],
            "2026-12-07T22:30:00Z",
            None,
        ),
        // Leap day: Tuesday 2028-02-29 23:00 for 2h runs into March 1st.
        (
            "leap day into march",
            vec![weekly(&[Tue], "23:00", 120, "UTC")],
            "2028-03-01T00:30:00Z",
            Some("2028-03-01T01:00:00Z"),
        ),
        (
            "cron on the leap day",
            vec![cron("0 3 29 2 *", 120, "UTC")],
            "2028-02-29T04:00:00Z",
            Some("2028-02-29T05:00:00Z"),
        ),
        (
            "cron weekday nights, friday",
            vec![cron("0 22 * * 1-5", 240, "Europe/Berlin")],
            "2026-12-04T22:00:00Z",
            Some("2026-12-05T01:00:00Z"),
        ),
        (
            "cron weekday nights, saturday",
            vec![cron("0 22 * * 1-5", 240, "Europe/Berlin")],
            "2026-12-05T22:00:00Z",
            None,
        ),
        // Several windows: the one that ends last counts.
        (
            "overlapping windows",
            vec![
                weekly(&Weekday::ALL, "01:00", 60, "UTC"),
                weekly(&Weekday::ALL, "01:30", 120, "UTC"),
            ],
            "2026-12-02T01:45:00Z",
            Some("2026-12-02T03:30:00Z"),
        ),
    ];
    for (name, windows, at, end) in cases {
        let refs: Vec<&Window> = windows.iter().collect();
        assert_eq!(
            current_window_end(&refs, ts(at)),
            end.map(ts),
            "{name}: at {at}"
        );
    }
}

#[test]
fn next_window_start_table() {
    let cases: Vec<(&str, Vec<Window>, &str, &str)> = vec![
        (
            "berlin weekend, from wednesday",
            vec![weekly(&[Sat, Sun], "02:00", 240, "Europe/Berlin")],
            "2026-12-02T12:00:00Z",
            "2026-12-05T01:00:00Z",
        ),
        (
            "berlin, over spring-forward",
            vec![weekly(&[Sun], "02:30", 60, "Europe/Berlin")],
            "2026-03-28T00:00:00Z",
            "2026-03-29T01:30:00Z",
        ),
        (
            "berlin, the week after spring-forward is CEST",
            vec![weekly(&[Sun], "02:30", 60, "Europe/Berlin")],
            "2026-03-29T02:00:00Z",
            "2026-04-05T00:30:00Z",
        ),
        (
            "berlin, over fall-back (first 02:30)",
            vec![weekly(&[Sun], "02:30", 60, "Europe/Berlin")],
            "2026-10-24T12:00:00Z",
            "2026-10-25T00:30:00Z",
        ),
        (
            "new york, over spring-forward",
            vec![weekly(&Weekday::ALL, "02:30", 60, "America/New_York")],
            "2026-03-07T12:00:00Z",
            "2026-03-08T07:30:00Z",
        ),
        (
            "new york, over fall-back",
            vec![weekly(&[Sun], "01:30", 60, "America/New_York")],
            "2026-11-01T06:00:00Z",
            "2026-11-08T06:30:00Z",
        ),
        (
            "sunday to monday",
            vec![weekly(&[Mon], "00:15", 30, "UTC")],
            "2026-12-06T23:59:00Z",
            "2026-12-07T00:15:00Z",
        ),
        (
            "a start is strictly after now",
            vec![weekly(&[Mon], "00:15", 30, "UTC")],
            "2026-12-07T00:15:00Z",
            "2026-12-14T00:15:00Z",
        ),
        (
            "leap day, years ahead",
            vec![cron("0 3 29 2 *", 60, "UTC")],
            "2026-12-01T00:00:00Z",
            "2028-02-29T03:00:00Z",
        ),
        (
            "leap day weekly",
            vec![weekly(&[Tue], "23:00", 60, "UTC")],
            "2028-02-27T00:00:00Z",
            "2028-02-29T23:00:00Z",
        ),
        (
            "the earliest of several",
            vec![
                weekly(&[Sat], "02:00", 60, "UTC"),
                cron("30 1 * * 4", 60, "Asia/Tokyo"),
            ],
            "2026-12-01T00:00:00Z",
            "2026-12-02T16:30:00Z",
        ),
    ];
    for (name, windows, at, next) in cases {
        let refs: Vec<&Window> = windows.iter().collect();
        assert_eq!(
            next_window_start(&refs, ts(at)),
            Some(ts(next)),
            "{name}: after {at}"
        );
    }
}

#[test]
fn block_with_until_is_a_freeze_that_ends() {
    let freeze = Disruption {
        policy: Some(At::bare(DisruptionPolicy::Block)),
        until: Some(At::bare("2027-01-04T08:00:00+01:00".to_string())),
        ..Disruption::default()
    };
    assert_eq!(
        gate(&freeze, ts("2026-12-24T12:00:00Z")),
        Gate::Closed {
            reason: "disruption policy Block".into(),
            opens: Some(ts("2027-01-04T07:00:00Z"))
        }
    );
    assert!(gate(&freeze, ts("2027-01-04T07:00:00Z")).is_open());
    let forever = Disruption {
        policy: Some(At::bare(DisruptionPolicy::Block)),
        ..Disruption::default()
    };
    assert_eq!(
        gate(&forever, ts("2030-01-01T00:00:00Z")),
        Gate::Closed {
            reason: "disruption policy Block".into(),
            opens: None
        }
    );
    assert!(gate(&Disruption::default(), ts("2030-01-01T00:00:00Z")).is_open());
}

#[test]
fn the_window_gate_says_when_it_closes_and_opens() {
    let d = Disruption {
        policy: Some(At::bare(DisruptionPolicy::AllowDuringMaintenanceWindow)),
        windows: vec![At::bare(weekly(&[Sat], "02:00", 240, "Europe/Berlin"))],
        ..Disruption::default()
    };
    assert_eq!(
        gate(&d, ts("2026-12-05T02:00:00Z")),
        Gate::Open {
            closes: Some(ts("2026-12-05T05:00:00Z"))
        }
    );
    match gate(&d, ts("2026-12-05T05:00:00Z")) {
        Gate::Closed { opens, .. } => assert_eq!(opens, Some(ts("2026-12-12T01:00:00Z"))),
        other => panic!("expected closed, got {other:?}"),
    }
}

/// cronexpr, stepping by itself through the fold of a half-hour DST change
/// (Australia/Lord_Howe, 2026-04-05 02:00 -> 01:30), never returns; windows
/// are evaluated on local wall-clock time so it never has to.
#[test]
fn cron_windows_move_on_through_every_dst_change_including_half_hour_ones() {
    let lord_howe = cron("30 2 * * 0,6", 60, "Australia/Lord_Howe");
    // Saturday 02:30 (+11:00), then Sunday 02:30, after the fold (+10:30).
    assert_eq!(
        next_window_start(&[&lord_howe], ts("2026-04-03T15:30:00Z")),
        Some(ts("2026-04-04T16:00:00Z"))
    );
    assert_eq!(
        current_window_end(&[&lord_howe], ts("2026-04-04T16:10:00Z")),
        Some(ts("2026-04-04T17:00:00Z"))
    );
    // Every opening over ten days around each change, in every zone: strictly
    // later each time, and open right then.
    for tz in [
        "UTC",
        "Europe/Berlin",
        "America/New_York",
        "Asia/Kolkata",
        "Australia/Lord_Howe",
    ] {
        for expr in [
            "30 2 * * 0,6",
            "*/20 1-3 * * *",
            "15 1 1-7 * *",
            "*/5 1-2 * * *",
        ] {
            let w = cron(expr, 30, tz);
            for from in [
                "2026-03-27T18:00:00Z",
                "2026-10-01T00:00:00Z",
                "2026-10-23T18:00:00Z",
                "2026-03-30T00:00:00Z",
            ] {
                let mut t = ts(from);
                let end = ts(from)
                    .checked_add(jiff::SignedDuration::from_hours(240))
                    .unwrap();
                while t < end {
                    let next = next_window_start(&[&w], t)
                        .unwrap_or_else(|| panic!("{tz} {expr}: no opening after {t}"));
                    assert!(next > t, "{tz} {expr}: {next} is not after {t}");
                    assert!(
                        current_window_end(&[&w], next).is_some(),
                        "{tz} {expr}: not open at its opening {next}"
                    );
                    t = next;
                }
            }
        }
    }
}
