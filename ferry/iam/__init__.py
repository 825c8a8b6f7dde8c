"""IAM sources to target RBAC: AWS IAM (aws), Azure (azure), LDAP (ldap), the mapping (model), the plan's
sources read (sources)."""
