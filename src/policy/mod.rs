//! Disruption policy: may a disruptive step (drain, terminate, reimage, scale-down)
//! START now? Pure functions of the policy and an instant; time-zone and DST
//! correct through jiff.
//!
//! A weekly window opens on each of its `days` at `start` local time in its
//! `timezone` and stays open for `duration` of elapsed time (so a 4h window over
//! a DST change is still 4 real hours). A local start time that does not exist
//! (spring forward) is moved forward by the length of the gap (02:30 opens at
//! 03:30), as cron and systemd timers do; one that exists twice (fall back)
//! opens at the first of them. A cron window opens at each local time its
//! expression matches in its time zone (cronexpr, on jiff), by the same rule
//! for local times that do not exist or exist twice, and stays open for `duration`.
//! `Block` with `until` is a freeze that ends at that instant.

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, ToSpan};

use crate::spec::types::{Disruption, DisruptionPolicy, Window};

/// The answer for one instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Disruptive steps may start; `closes` is when the current window ends (if any).
    Open { closes: Option<Timestamp> },
    /// They may not; `opens` is the next window start (None: not until the policy changes).
    Closed {
        reason: String,
        opens: Option<Timestamp>,
    },
}

impl Gate {
    pub fn is_open(&self) -> bool {
        matches!(self, Gate::Open { .. })
    }
}

pub fn gate(d: &Disruption, now: Timestamp) -> Gate {
    match d.policy() {
        DisruptionPolicy::Allow => Gate::Open { closes: None },
        DisruptionPolicy::Block => match d.until() {
            Some(until) if now >= until => Gate::Open { closes: None },
            until => Gate::Closed {
                reason: "disruption policy Block".into(),
                opens: until,
            },
        },
        DisruptionPolicy::AllowDuringMaintenanceWindow => {
            let windows: Vec<&Window> = d.windows.iter().map(|w| &w.value).collect();
            match current_window_end(&windows, now) {
                Some(end) => Gate::Open { closes: Some(end) },
                None => Gate::Closed {
                    reason: "disruption policy AllowDuringMaintenanceWindow (outside every window)"
                        .into(),
                    opens: next_window_start(&windows, now),
                },
            }
        }
    }
}

/// The stretches of `[from, to)` in which disruptive steps may start, in
/// order (for the status page's strip of the coming days). Walks the gate
/// from opening to closing; each step moves forward, and the count of
/// stretches is bounded, so a pathological policy cannot loop.
pub fn open_intervals(
    d: &Disruption,
    from: Timestamp,
    to: Timestamp,
) -> Vec<(Timestamp, Timestamp)> {
    // A week of the densest windows (a cron every minute) is far more than
    // a strip can show; stop well before it.
    const MAX: usize = 1024;
    let mut out = Vec::new();
    let mut t = from;
    while t < to && out.len() < MAX {
        match gate(d, t) {
            Gate::Open { closes } => {
                let end = closes.unwrap_or(to).min(to);
                if end <= t {
                    break;
                }
                // Adjacent windows merge into one stretch.
                match out.last_mut() {
                    Some((_, e)) if *e == t => *e = end,
                    _ => out.push((t, end)),
                }
                t = end;
            }
            Gate::Closed { opens, .. } => match opens {
                Some(o) if o > t => t = o,
                _ => break,
            },
        }
    }
    out
}

fn tz_of(w: &Window) -> TimeZone {
    // Validation rejects unknown zones; UTC keeps this total all the same.
    TimeZone::get(w.timezone.as_str()).unwrap_or(TimeZone::UTC)
}

/// A cron window's schedule. The expression is matched against local wall-clock
/// time: it is parsed in UTC and asked about civil times, and each matching local
/// time becomes an instant by the weekly windows' rule (moved forward over a
/// gap, the first of two in a fold). cronexpr's own stepping in a zone with DST
/// can loop forever in the fold of a half-hour shift (Australia/Lord_Howe), so it
/// never sees one.
struct CronWindow {
    tab: cronexpr::Crontab,
    tz: TimeZone,
}

/// More than any DST change moves a local time: openings are looked for this
/// far on either side, because near a change the order of local times and the
/// order of instants differ (02:30 in a gap opens at 03:30, after 03:10).
const SHIFT: SignedDuration = SignedDuration::from_hours(3);

impl CronWindow {
    fn of(w: &Window) -> Option<CronWindow> {
        let expr = w.cron.as_ref()?;
        Some(CronWindow {
            tab: crate::spec::values::parse_cron(expr.as_str(), "UTC").ok()?,
            tz: tz_of(w),
        })
    }

    /// Openings in local-time order from the local time of `start` on.
    fn openings_from(&self, start: Timestamp) -> impl Iterator<Item = Timestamp> + '_ {
        let mut civil = start.to_zoned(self.tz.clone()).datetime();
        std::iter::from_fn(move || {
            let probe = civil.to_zoned(TimeZone::UTC).ok()?.timestamp();
            // In UTC, find_next always moves on (no DST to step through).
            let matched = self.tab.find_next(probe).ok()?.datetime();
            civil = matched;
            let at = self.tz.to_ambiguous_zoned(matched).compatible().ok()?;
            Some(at.timestamp())
        })
    }

    /// The first opening strictly after `after`.
    fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        let mut later = self
            .openings_from(after.checked_sub(SHIFT).ok()?)
            .filter(|at| *at > after);
        let first = later.next()?;
        let horizon = first.checked_add(SHIFT).ok()?;
        Some(
            later
                .take_while(|at| *at <= horizon)
                .fold(first, Timestamp::min),
        )
    }

    /// The latest opening in `(since, now]`.
    fn latest_in(&self, since: Timestamp, now: Timestamp) -> Option<Timestamp> {
        let horizon = now.checked_add(SHIFT).ok()?;
        self.openings_from(since.checked_sub(SHIFT).ok()?)
            .take_while(|at| *at <= horizon)
            .filter(|at| since < *at && *at <= now)
            .max()
    }
}

/// Starts of weekly window `w`'s occurrences on local dates `from..=to`.
fn starts(w: &Window, tz: &TimeZone, from: Date, to: Date) -> impl Iterator<Item = Timestamp> {
    let days: Vec<jiff::civil::Weekday> = w.days.iter().map(|d| d.to_jiff()).collect();
    let time = w.start.as_ref().map(|s| s.value.0);
    let tz = tz.clone();
    from.series(1.day())
        .take_while(move |d| *d <= to)
        .filter(move |d| days.contains(&d.weekday()))
        .filter_map(move |d| {
            tz.to_ambiguous_zoned(d.to_datetime(time?))
                .compatible()
                .ok()
        })
        .map(|z| z.timestamp())
}

fn duration_of(w: &Window) -> SignedDuration {
    SignedDuration::try_from(w.duration.value.as_std()).unwrap_or(SignedDuration::ZERO)
}

/// The end of the latest-ending window that contains `now`, if any.
pub fn current_window_end(windows: &[&Window], now: Timestamp) -> Option<Timestamp> {
    windows
        .iter()
        .filter_map(|w| {
            let len = duration_of(w);
            if let Some(cron) = CronWindow::of(w) {
                // Only openings within the last `duration` can contain now; the
                // latest of them ends last (they all last as long).
                return cron
                    .latest_in(now.checked_sub(len).ok()?, now)
                    .and_then(|s| s.checked_add(len).ok())
                    .filter(|e| now < *e);
            }
            let tz = tz_of(w);
            let today = now.to_zoned(tz.clone()).date();
            // Windows last at most 7 days, so one that contains now started within 8 local days.
            let from = today.checked_sub(8.days()).ok()?;
            starts(w, &tz, from, today)
                .take_while(|s| *s <= now)
                .filter_map(|s| Some((s, s.checked_add(len).ok()?)))
                .filter(|(s, e)| *s <= now && now < *e)
                .map(|(_, e)| e)
                .max()
        })
        .max()
}

/// The first window start strictly after `now`.
pub fn next_window_start(windows: &[&Window], now: Timestamp) -> Option<Timestamp> {
    windows
        .iter()
        .filter_map(|w| {
            if let Some(cron) = CronWindow::of(w) {
                // A cron window may next open far ahead (a leap day): ask the cron.
                return cron.next_after(now);
            }
            let tz = tz_of(w);
            let today = now.to_zoned(tz.clone()).date();
            let to = today.checked_add(8.days()).ok()?;
            starts(w, &tz, today.checked_sub(1.day()).ok()?, to).find(|s| *s > now)
        })
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::located::At;
    use crate::spec::values::{Duration, TimeOfDay, Weekday};

    fn window(days: &[Weekday], start: &str, hours: u64, tz: &str) -> Window {
        Window {
            days: At::bare(days.to_vec()),
            start: Some(At::bare(TimeOfDay::parse(start).unwrap())),
            cron: None,
            duration: At::bare(Duration::secs(hours * 3600)),
            timezone: At::bare(tz.to_string()),
        }
    }

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn open_intervals_of_a_week() {
        let w = window(&[Weekday::Sat, Weekday::Sun], "02:00", 4, "Europe/Berlin");
        let d = Disruption {
            policy: Some(At::bare(DisruptionPolicy::AllowDuringMaintenanceWindow)),
            windows: vec![At::bare(w)],
            ..Disruption::default()
        };
        let from = ts("2026-12-02T12:00:00Z");
        let to = ts("2026-12-09T12:00:00Z");
        assert_eq!(
            open_intervals(&d, from, to),
            vec![
                (ts("2026-12-05T01:00:00Z"), ts("2026-12-05T05:00:00Z")),
                (ts("2026-12-06T01:00:00Z"), ts("2026-12-06T05:00:00Z")),
            ]
        );
        // Inside a window: the strip starts open, cut at `from`.
        let inside = ts("2026-12-05T03:00:00Z");
        assert_eq!(
            open_intervals(&d, inside, to)[0],
            (inside, ts("2026-12-05T05:00:00Z"))
        );
        assert_eq!(
            open_intervals(&Disruption::default(), from, to),
            vec![(from, to)]
        );
        let block = Disruption {
            policy: Some(At::bare(DisruptionPolicy::Block)),
            ..Disruption::default()
        };
        assert!(open_intervals(&block, from, to).is_empty());
        let freeze = Disruption {
            until: Some(At::bare("2026-12-04T00:00:00Z".to_string())),
            ..block
        };
        assert_eq!(
            open_intervals(&freeze, from, to),
            vec![(ts("2026-12-04T00:00:00Z"), to)]
        );
    }

    #[test]
    fn weekend_window_in_berlin() {
        let w = window(&[Weekday::Sat, Weekday::Sun], "02:00", 4, "Europe/Berlin");
        // Saturday 2026-12-05 02:00 CET is 01:00 UTC.
        assert_eq!(
            current_window_end(&[&w], ts("2026-12-05T01:30:00Z")),
            Some(ts("2026-12-05T05:00:00Z"))
        );
        assert_eq!(current_window_end(&[&w], ts("2026-12-05T05:00:00Z")), None);
        assert_eq!(
            next_window_start(&[&w], ts("2026-12-02T12:00:00Z")),
            Some(ts("2026-12-05T01:00:00Z"))
        );
        assert_eq!(
            next_window_start(&[&w], ts("2026-12-05T02:00:00Z")),
            Some(ts("2026-12-06T01:00:00Z"))
        );
    }

    #[test]
    fn window_crossing_midnight_and_the_week_boundary() {
        let w = window(&[Weekday::Sun], "22:00", 6, "UTC");
        // Sunday 22:00 to Monday 04:00.
        assert!(current_window_end(&[&w], ts("2026-12-07T03:59:00Z")).is_some());
        assert!(current_window_end(&[&w], ts("2026-12-07T04:00:00Z")).is_none());
    }

    #[test]
    fn spring_forward_gap_opens_after_the_gap() {
        // 2026-03-29: Europe/Berlin skips 02:00-03:00.
        let w = window(&[Weekday::Sun], "02:30", 1, "Europe/Berlin");
        assert_eq!(
            next_window_start(&[&w], ts("2026-03-28T00:00:00Z")),
            Some(ts("2026-03-29T01:30:00Z"))
        );
    }
}
