//! The verdict on a missed target: "beyond this machine" beside a floor that misses the same
//! bound, with leasehold at that floor (issue 32's closing rule), or missed.

use serde_json::{Value, json};

/// The targets judged beside a floor: (the target, the reference row of its floor against the
/// same bound, the reference row of leasehold against that floor, if any).
pub(super) const BESIDE_FLOORS: [(&str, &str, Option<&str>); 5] = [
    (
        "W1 cycles/s history on / off",
        "W1 scripted floor cycles/s history on / off",
        Some("W1 p50 history on / the scripted floor's"),
    ),
    // The bound is above one hold after another: no lock reaches it, so no leasehold row.
    (
        "W3 fair, a client each: acquisitions/s / best peer",
        "W3 the hold's ceiling / best peer",
        None,
    ),
    (
        "W1B cycles/s postgres history on / off",
        "W1B floor cycles/s postgres history on / off",
        Some("W1B p50 postgres history / its floor's"),
    ),
    (
        "W1B cycles/s postgres_lease_rows history on / off",
        "W1B floor cycles/s postgres_lease_rows history on / off",
        Some("W1B p50 postgres_lease_rows history / its floor's"),
    ),
    (
        "W1B p50 postgres / its floor",
        "W1B p50 postgres statements floor / postgres floor",
        Some("W1B p50 postgres / the statements floor"),
    ),
];

/// Marks `beyond` each target of `beside` that a run missed where its floor (the same work
/// with no lock logic, or a ceiling no lock passes) misses the same bound, and leasehold is at
/// that floor (its row against the floor met, where there is one): what this machine allows
/// no lock, not a miss of leasehold's. A target whose floor meets the bound, or whose
/// leasehold row is not at the floor, stays missed.
pub(super) fn judge(rows: &mut [Value], beside: &[(&str, &str, Option<&str>)]) {
    let met = |rows: &[Value], name: &str| {
        rows.iter()
            .find(|t| t["target"] == name)
            .and_then(|t| t["met"].as_bool())
    };
    let beyond: Vec<(String, Value)> = beside
        .iter()
        .filter(|(target, floor, at_floor)| {
            met(rows, target) == Some(false)
                && met(rows, floor) == Some(false)
                && at_floor.is_none_or(|at| met(rows, at) == Some(true))
        })
        .map(|(target, floor, at_floor)| {
            let why = json!({ "floor": floor, "at_floor": at_floor });
            (target.to_string(), why)
        })
        .collect();
    for (target, why) in beyond {
        if let Some(t) = rows.iter_mut().find(|t| t["target"] == target.as_str()) {
            t["beyond"] = why;
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::targets;
    use super::{BESIDE_FLOORS, judge};
    use crate::bench::Results;

    fn row(target: &str, met: Option<bool>) -> Value {
        json!({ "target": target, "met": met })
    }

    /// A missed target is beyond the machine only when its floor misses the bound too and
    /// leasehold is at that floor; met, or beside a floor that meets it, it is left alone.
    #[test]
    fn a_miss_is_beyond_only_beside_a_floor_that_misses_too_with_leasehold_at_it() {
        let beside = [
            ("a", "a floor", Some("a at floor")),
            ("b", "b floor", Some("b at floor")),
            ("c", "c floor", None),
            ("d", "d floor", None),
            ("e", "e floor", None),
        ];
        let mut rows = vec![
            row("a", Some(false)),
            row("a floor", Some(false)),
            row("a at floor", Some(true)),
            row("b", Some(false)),
            row("b floor", Some(false)),
            row("b at floor", Some(false)),
            row("c", Some(false)),
            row("c floor", Some(true)),
            row("d", Some(true)),
            row("d floor", Some(false)),
            row("e", Some(false)),
            row("e floor", None),
        ];
        judge(&mut rows, &beside);
        let beyond: Vec<&str> = rows
            .iter()
            .filter(|t| t.get("beyond").is_some())
            .map(|t| t["target"].as_str().unwrap())
            .collect();
        assert_eq!(beyond, ["a"]);
        assert_eq!(rows[0]["beyond"]["floor"], "a floor");
    }

    /// Every name the floors' list gives is a row of the targets (a name that drifted would
    /// leave its target missed for good), the targets checked, the floors references.
    #[test]
    fn the_floors_list_names_rows_of_the_targets() {
        let rows = targets(&Results::default());
        let kind = |name: &str| {
            let row = rows
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["target"] == name);
            row.map(|t| t["reference"].as_bool().unwrap())
        };
        for (target, floor, at_floor) in BESIDE_FLOORS {
            assert_eq!(kind(target), Some(false), "{target}");
            assert_eq!(kind(floor), Some(true), "{floor}");
            if let Some(at) = at_floor {
                assert_eq!(kind(at), Some(true), "{at}");
            }
        }
    }
}
