"""The freeze's bucket policy: a ferry-owned Deny of writes by everyone but ferry's own identity, merged into the
bucket's policy with a deadline, and taken out again; no I/O."""

from __future__ import annotations

import json
import re
from datetime import datetime

SID = "FerryCutoverDenyWrites"
# Every way to change an object, never the policy actions (ferry must be able to take its Deny out again).
WRITE_ACTIONS = [
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:DeleteObjectVersion",
    "s3:PutObjectAcl",
    "s3:PutObjectTagging",
    "s3:RestoreObject",
]
_ASSUMED_ROLE = re.compile(r"^arn:(aws[a-z-]*):sts::(\d{12}):assumed-role/([^/]+)/.+$")


def principal_arn(caller_arn: str) -> str:
    """The ARN `aws:PrincipalArn` holds for the caller: an assumed role's session is its role."""
    match = _ASSUMED_ROLE.match(caller_arn)
    if match is None:
        return caller_arn
    partition, account, role = match.groups()
    return f"arn:{partition}:iam::{account}:role/{role}"


def deny_writes(prior: str | None, bucket: str, root: str, exempt_arn: str, deadline: datetime) -> str:
    """prior (the bucket's policy, or None) with ferry's Deny statement added (replacing one a crashed cut-over
    left): writes under root by any principal but exempt_arn, until deadline (UTC)."""
    document = json.loads(prior) if prior else {"Version": "2012-10-17", "Statement": []}
    statements = document.get("Statement", [])
    if isinstance(statements, dict):
        statements = [statements]
    resource = f"arn:aws:s3:::{bucket}/{root.strip('/') + '/' if root.strip('/') else ''}*"
    ours = {
        "Sid": SID,
        "Effect": "Deny",
        "Principal": "*",
        "Action": WRITE_ACTIONS,
        "Resource": resource,
        "Condition": {
            "ArnNotEquals": {"aws:PrincipalArn": exempt_arn},
            "DateLessThan": {"aws:CurrentTime": deadline.strftime("%Y-%m-%dT%H:%M:%SZ")},
        },
    }
    document["Statement"] = [s for s in statements if s.get("Sid") != SID] + [ours]
    return json.dumps(document)
