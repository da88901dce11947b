"""The verl suite: real verl classes (``.venv-verl``, ``make test-verl``); skipped where verl is
absent, a failure there under ``PAIRHT_REQUIRE_VERL=1``. test_trl_fixture.py is the one module
that runs in the main environment instead (it needs TRL, which .venv-verl cannot hold)."""
