"""The blocking adapter's layer, written from the async one (``coder_io_common._async``) by
``.ci/unasync.py``: do not edit these modules, edit their async source and run
``python .ci/unasync.py``. ``coder_io_sync``'s public modules subclass what is here."""
