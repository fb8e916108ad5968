"""Security: listeners and their protocols (``listeners``), SASL sessions (``sasl``: PLAIN, SCRAM), SCRAM
credentials (``credentials``) and ACLs with the authorizer (``acls``)."""
