"""Code the tests share: builders of trajectories and input files, scripted LMs and fake-server replies, poison
corpora for the leak tests and the renderer's grammar. Test modules import from here (or get a fixture from a
`conftest.py`), never from another test module; `tests/test_layout.py` checks it."""
