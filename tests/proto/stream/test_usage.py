"""Usage summation (state machines F.1-F.5; D17)."""

from __future__ import annotations

from typing import Any

import pytest

from coder_proto import Usage
from coder_proto._stream.usage import UsageAccumulator, provider_metadata_from_raw, sum_usage
from coder_proto._wire import ChatMessageUsage


def wire(**fields: Any) -> ChatMessageUsage:
    return ChatMessageUsage.from_json(fields)


def test_f2_worked_example_sums_steps_and_adds_cache_back_into_input() -> None:
    acc = UsageAccumulator()
    acc.record(
        11, wire(input_tokens=5, cache_read_tokens=100, output_tokens=7, context_limit=200000)
    )
    acc.record(
        12,
        wire(
            input_tokens=3,
            cache_read_tokens=120,
            cache_creation_tokens=10,
            output_tokens=9,
            context_limit=180000,
        ),
    )
    assert acc.raw() == {
        "input_tokens": 8,
        "cache_read_tokens": 220,
        "cache_creation_tokens": 10,
        "output_tokens": 16,
        "context_limit": 180000,
    }
    usage = acc.usage()
    assert (usage.input_tokens, usage.no_cache_tokens) == (238, 8)
    assert (usage.cache_read_tokens, usage.cache_write_tokens) == (220, 10)
    assert usage.output_tokens == 16
    assert usage.text_tokens is None
    assert usage.raw == acc.raw()
    # D17: total = input total + output.
    assert usage.total_tokens == 254


def test_f1_latest_snapshot_per_message_id_wins() -> None:
    acc = UsageAccumulator()
    acc.record(2, wire(input_tokens=10, output_tokens=3))
    acc.record(2, wire(input_tokens=12, output_tokens=4))
    acc.record(2, wire(input_tokens=12, output_tokens=4))
    assert acc.raw() == {"input_tokens": 12, "output_tokens": 4}
    assert acc.message_ids == (2,)


def test_f1_context_limit_and_unknown_fields_come_from_the_highest_id_not_the_last_recorded() -> (
    None
):
    acc = UsageAccumulator()
    acc.record(12, wire(context_limit=180000, web_search_requests=3))
    acc.record(11, wire(context_limit=200000, web_search_requests=2, cache_hint="warm"))
    raw = acc.raw()
    assert raw == {"context_limit": 180000, "web_search_requests": 3, "cache_hint": "warm"}


def test_f1_a_sum_field_without_any_number_takes_the_newest_value() -> None:
    acc = UsageAccumulator()
    acc.record(3, wire(total_cost_micros="n/a"))
    acc.record(5, wire(total_cost_micros="unknown"))
    assert acc.raw() == {"total_cost_micros": "unknown"}
    assert acc.provider_metadata() == {"coder": {"total_cost_micros": "unknown"}}


def test_f1_non_numeric_values_do_not_spoil_a_sum_of_numbers() -> None:
    acc = UsageAccumulator()
    acc.record(3, wire(output_tokens=4))
    acc.record(5, wire(output_tokens="garbage"))
    acc.record(7, wire(output_tokens=6, reasoning_tokens=True))
    raw = acc.raw()
    assert raw is not None
    assert raw["output_tokens"] == 10
    # A JSON boolean is not a number: it is kept as the newest value, not summed.
    assert raw["reasoning_tokens"] is True
    assert acc.usage().reasoning_tokens is None


def test_f1_null_fields_count_as_absent() -> None:
    acc = UsageAccumulator()
    acc.record(2, wire(input_tokens=4, cache_read_tokens=None))
    assert acc.raw() == {"input_tokens": 4}
    assert acc.usage().cache_read_tokens is None


def test_f2_no_usage_at_all_is_none_everywhere() -> None:
    acc = UsageAccumulator()
    assert acc.raw() is None
    assert acc.usage() == Usage()
    assert acc.usage().raw is None
    assert acc.provider_metadata() is None


@pytest.mark.parametrize(
    ("fields", "total"),
    [
        ({"output_tokens": 3}, None),
        ({"cache_read_tokens": 7}, 7),
        ({"cache_creation_tokens": 2}, 2),
        ({"input_tokens": 0}, 0),
        ({"input_tokens": 1, "cache_read_tokens": 2, "cache_creation_tokens": 3}, 6),
    ],
)
def test_f2_input_total_is_missing_only_when_all_three_operands_are(
    fields: dict[str, Any], total: int | None
) -> None:
    acc = UsageAccumulator()
    acc.record(1, wire(**fields))
    assert acc.usage().input_tokens == total


def test_f2_integral_floats_count_and_fractional_ones_stay_raw_only() -> None:
    acc = UsageAccumulator()
    acc.record(1, wire(input_tokens=2.0, output_tokens=1.5))
    usage = acc.usage()
    assert usage.no_cache_tokens == 2
    assert usage.output_tokens is None
    assert usage.raw == {"input_tokens": 2.0, "output_tokens": 1.5}


@pytest.mark.parametrize(
    ("fields", "metadata"),
    [
        ({"total_cost_micros": 42}, {"coder": {"total_cost_micros": 42}}),
        ({"total_runtime_ms": 9}, {"coder": {"total_runtime_ms": 9}}),
        (
            {"total_cost_micros": 1, "total_runtime_ms": 2},
            {"coder": {"total_cost_micros": 1, "total_runtime_ms": 2}},
        ),
        ({"input_tokens": 5}, None),
    ],
)
def test_f3_provider_metadata_mirrors_only_the_cost_keys_sent(
    fields: dict[str, Any], metadata: dict[str, Any] | None
) -> None:
    acc = UsageAccumulator()
    acc.record(1, wire(**fields))
    assert acc.provider_metadata() == metadata
    assert provider_metadata_from_raw(fields) == metadata


def test_f3_cost_and_runtime_are_summed_across_steps() -> None:
    acc = UsageAccumulator()
    acc.record(2, wire(total_cost_micros=100, total_runtime_ms=1500))
    acc.record(4, wire(total_cost_micros=120, total_runtime_ms=900))
    assert acc.provider_metadata() == {
        "coder": {"total_cost_micros": 220, "total_runtime_ms": 2400}
    }


def test_f4_forget_through_drops_messages_at_or_below_the_cursor() -> None:
    acc = UsageAccumulator()
    acc.record(1, wire(input_tokens=100))
    acc.record(2, wire(input_tokens=10))
    acc.record(3, wire(input_tokens=1))
    acc.forget_through(2)
    assert acc.message_ids == (3,)
    assert acc.raw() == {"input_tokens": 1}


def test_record_accepts_usage_built_in_code_without_a_wire_object() -> None:
    acc = UsageAccumulator()
    acc.record(1, ChatMessageUsage(input_tokens=4, output_tokens=2))
    assert acc.raw() == {"input_tokens": 4, "output_tokens": 2}


def test_f5_turn_usage_is_the_field_wise_sum_with_none_plus_none_none() -> None:
    step1 = Usage(input_tokens=2900, no_cache_tokens=2100, cache_read_tokens=800, output_tokens=90)
    step2 = Usage(
        input_tokens=2200, no_cache_tokens=1200, cache_read_tokens=1000, output_tokens=30, raw={}
    )
    total = sum_usage([step1, step2])
    assert total.input_tokens == 5100
    assert total.no_cache_tokens == 3300
    assert total.cache_read_tokens == 1800
    assert total.output_tokens == 120
    assert total.cache_write_tokens is None
    assert total.reasoning_tokens is None
    assert total.raw is None
    assert total.total_tokens == 5220


def test_f5_a_missing_value_counts_as_zero_when_another_step_has_one() -> None:
    total = sum_usage([Usage(reasoning_tokens=7), Usage(), Usage(output_tokens=1)])
    assert total.reasoning_tokens == 7
    assert total.output_tokens == 1
    assert total.input_tokens is None


def test_f5_sum_of_no_steps_is_all_none() -> None:
    assert sum_usage([]) == Usage()
    assert sum_usage(iter([])).total_tokens is None
