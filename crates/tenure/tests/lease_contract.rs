//! The lease contract, run against every backend (memory, SQLite, a real
//! redis-server and a Redis quorum). The bodies live in `lease_common`, shared
//! with the etcd run (`etcd_contract.rs`) at etcd's time scale.

mod common;
mod lease_common;

use common::Fixture;
use lease_common::Timing;

/// One test per backend for each shared contract function, at the time scale
/// of stores that expire a key at its TTL.
macro_rules! lease_contract {
    ($($name:ident),* $(,)?) => {
        contract!($($name),*);
        $(
            async fn $name(fx: &Fixture) {
                lease_common::$name(&fx.tenure, &Timing::EXACT).await;
            }
        )*
    };
}

lease_contract!(
    second_acquire_fails_while_held_then_succeeds_after_expiry,
    release_and_extend_by_a_stale_holder_change_nothing,
    watchdog_keeps_the_lease_for_several_ttls,
    lost_signal_fires_at_the_local_deadline_without_renewal,
    extend_never_revives_an_expired_lease,
    release_hands_over_to_a_waiter_quickly,
    waiter_gets_an_expiring_lease_when_its_ttl_runs_out,
    acquire_within_gives_up_at_its_deadline,
    dropping_a_guard_releases_in_the_background,
    sixty_four_tasks_lose_no_increment_and_fences_increase,
    run_cancels_work_when_the_lease_is_lost,
    bad_input_is_a_clear_error,
    a_ttl_or_renewal_that_leaves_no_validity_is_refused,
    holder_is_recorded_read_by_anyone_and_released_with_the_lease,
    holder_record_expires_with_the_lease,
    list_shows_the_held_leases_under_a_prefix,
    a_waiter_that_gets_the_lease_records_itself,
);
