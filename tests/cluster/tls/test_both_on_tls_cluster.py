"""Producers, readers, consumers, ownership and elections written once for both flavours, on a
cluster reached only over TLS (``rediss+cluster://``): the script path, the cluster client
and the per-node pub/sub connections all speak TLS."""

from __future__ import annotations

from ...consumers.test_both_flavours import (
    test_a_superseded_consumer_commits_nothing,
    test_a_topic_opened_without_partitions_must_exist,
    test_reader_seeks_blocks_and_tails,
)
from ...election.test_both_flavours import (
    test_election_terms_grow_callbacks_run_once_and_resign_wakes,
    test_observe_reports_each_leader_change,
)
from ...ownership.test_both_flavours import (
    test_a_claim_refused_as_stale_severs_no_holder,
    test_a_reclaim_whose_outcome_is_unknown_keeps_the_grant_held_before,
    test_claim_conflict_wait_and_release_wakes_the_waiter,
)
from ...producers.test_both_flavours import (
    test_a_named_incarnation_fences_the_older_one,
    test_an_idle_producer_whose_state_expired_goes_on_as_one_fresh_pid,
    test_bad_input_is_refused_before_any_write,
    test_closing_a_producer_waiting_in_the_queue_ends_its_wait_at_once,
    test_exclusive_refuses_while_another_lives_and_fencing_takes_over,
    test_expected_offset_mismatch_carries_the_real_next_offset,
    test_idempotent_resend_after_resume_is_deduplicated,
    test_records_land_on_the_server_the_client_was_given,
    test_sends_land_at_contiguous_offsets_and_read_back_exactly,
    test_wait_for_exclusive_queues_in_order_and_each_writes_alone,
)

__all__ = [
    "test_a_claim_refused_as_stale_severs_no_holder",
    "test_a_named_incarnation_fences_the_older_one",
    "test_a_reclaim_whose_outcome_is_unknown_keeps_the_grant_held_before",
    "test_a_superseded_consumer_commits_nothing",
    "test_a_topic_opened_without_partitions_must_exist",
    "test_an_idle_producer_whose_state_expired_goes_on_as_one_fresh_pid",
    "test_bad_input_is_refused_before_any_write",
    "test_claim_conflict_wait_and_release_wakes_the_waiter",
    "test_closing_a_producer_waiting_in_the_queue_ends_its_wait_at_once",
    "test_election_terms_grow_callbacks_run_once_and_resign_wakes",
    "test_exclusive_refuses_while_another_lives_and_fencing_takes_over",
    "test_expected_offset_mismatch_carries_the_real_next_offset",
    "test_idempotent_resend_after_resume_is_deduplicated",
    "test_observe_reports_each_leader_change",
    "test_reader_seeks_blocks_and_tails",
    "test_records_land_on_the_server_the_client_was_given",
    "test_sends_land_at_contiguous_offsets_and_read_back_exactly",
    "test_wait_for_exclusive_queues_in_order_and_each_writes_alone",
]
