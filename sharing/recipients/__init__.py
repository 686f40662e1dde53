"""Recipients: named principals with share grants, credentials, expiry, IP allow-lists and an
audit trail. `model` holds the plain data, `secrets` the token and password formats,
`repository` the store-backed records, `directory` the merge of the configuration's and the
store's recipients and the authentication of a presented credential to a `Principal`.

This package knows nothing of HTTP; `app/auth.py` turns its results into a dependency.
"""
