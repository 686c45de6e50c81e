"""write-modes' table notes: one example per flag name, however many trials raised it."""

from __future__ import annotations

from iolab.studies.write_modes.presentation import _flags_words


def test_a_flag_every_trial_raised_with_its_own_numbers_is_one_example_and_a_count() -> None:
    raised = sorted(["disk_shared: the disk under the target (vda) moved 70.2 MiB and 4632 flushes in 0.6 s",
                     "disk_shared: the disk under the target (vda) moved 50.4 MiB and 3617 flushes in 0.4 s",
                     "disk_shared: the disk under the target (vda) moved 56.4 MiB and 4052 flushes in 0.5 s",
                     "mode_not_effective: o_direct left 80% of pages cached"])
    words = _flags_words(raised)
    assert words == (f"{raised[0]} (and 2 more like it); mode_not_effective: o_direct left 80% of pages cached"), words
    assert _flags_words(["helper_warning: short write"]) == "helper_warning: short write"
    assert _flags_words([]) == ""
