"""The pipeline: build -> SBOM -> test -> push -> report, driven by ONE options object (settings.RunOptions) over ONE
loaded plan + record (loaded.Loaded). Commands parse flags into RunOptions and call one entry point of flow.py:

    flow.build_run(options, say)  -> RunResult   (`build`, with its --test/--push steps)
    flow.test_run(options, say)   -> RunResult   (`test --matrix`)
    flow.push_run(options, say)   -> RunResult   (`push`)

Each stage hands the next a typed result (building.BuildRun, testing.TestedImage, pushing.PushRun), never a status
string or a loose dict; the report rows (models.ImageResult) are filled from them. `--only` is selected once
(selection.py), the record is loaded and trust-checked once (loaded.py), and "is this planned image here?" has one
answer (located.py).

This __init__ imports nothing: `imagebuild --help` loads every command module, and those import settings.py at
module level, which must not pull the engine SDK in.
"""
