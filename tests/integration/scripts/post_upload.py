"""Browser form uploads (POST Object) through Portico and to MinIO directly, with boto3's
generate_presigned_post, sent as multipart/form-data the way a web page's form sends it. Every case is sent
to both with a policy signed by each side's own credentials (Portico's client credential
is not MinIO's), and both must answer alike: status, S3 error code, stored bytes and
headers. Prints one line per case; any difference raises (non-zero exit).

Arguments: portico_url portico_key portico_secret minio_url minio_key minio_secret
bucket_through bucket_direct mode (sigv4 | none)."""

import base64
import copy
import datetime
import hashlib
import hmac
import json
import re
import sys
import urllib.error
import urllib.request
import uuid

import boto3
from botocore.config import Config

(portico_url, portico_key, portico_secret, minio_url, minio_key, minio_secret,
 bucket_through, bucket_direct, mode) = sys.argv[1:10]


def client(endpoint, key, secret):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, signature_version="s3v4",
                      retries={"max_attempts": 1}),
    )


through = client(portico_url, portico_key, portico_secret)
direct = client(minio_url, minio_key, minio_secret)
# What a reader sees through Portico, with the credentials reads use.
reader = through if mode == "sigv4" else client(portico_url, minio_key, minio_secret)


def signed_policy(secret, key_id, bucket, conditions, expiration):
    """A policy signed by hand (for policies boto3 will not make: expired ones)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    date = now.strftime("%Y%m%d")
    credential = f"{key_id}/{date}/us-east-1/s3/aws4_request"
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    conditions = conditions + [
        {"bucket": bucket},
        {"x-amz-algorithm": "AWS4-HMAC-SHA256"},
        {"x-amz-credential": credential},
        {"x-amz-date": amz_date},
    ]
    document = {"expiration": expiration.strftime("%Y-%m-%dT%H:%M:%S.000Z"), "conditions": conditions}
    policy = base64.b64encode(json.dumps(document).encode()).decode()
    signing = ("AWS4" + secret).encode()
    for part in (date, "us-east-1", "s3", "aws4_request"):
        signing = hmac.new(signing, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(signing, policy.encode(), hashlib.sha256).hexdigest()
    return {
        "policy": policy,
        "x-amz-algorithm": "AWS4-HMAC-SHA256",
        "x-amz-credential": credential,
        "x-amz-date": amz_date,
        "x-amz-signature": signature,
    }


class Answer:
    """What a form upload was answered with."""

    def __init__(self, status_code, headers, text):
        self.status_code, self.headers, self.text = status_code, headers, text


class NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def send_form(url, fields, filename, data):
    """POSTs `fields` and then the file, as multipart/form-data (the file last, as S3
    requires), without following a redirect."""
    boundary = uuid.uuid4().hex
    body = b""
    for name, value in fields.items():
        body += (f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'
                 f"{value}\r\n").encode()
    body += (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
             "Content-Type: application/octet-stream\r\n\r\n").encode()
    body += data + f"\r\n--{boundary}--\r\n".encode()
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": f"multipart/form-data; boundary={boundary}"})
    opener = urllib.request.build_opener(NoRedirects)
    try:
        with opener.open(request, timeout=30) as response:
            return Answer(response.status, response.headers, response.read().decode())
    except urllib.error.HTTPError as error:
        return Answer(error.code, error.headers, error.read().decode())


def code_of(response):
    found = re.search(r"<Code>([^<]*)</Code>", response.text or "")
    return found.group(1) if found else None


def post(side, key, data, fields=None, conditions=None, filename="upload.txt", extra=None,
         tamper=None, expired=False, expires_in=600):
    s3, bucket, endpoint, key_id, secret = side
    if expired:
        past = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
        form = dict(fields or {}, key=key)
        form.update(signed_policy(secret, key_id, bucket, (conditions or []) + [{"key": key}], past))
        url = f"{endpoint}/{bucket}"
    else:
        presigned = s3.generate_presigned_post(bucket, key, Fields=fields, Conditions=conditions,
                                               ExpiresIn=expires_in)
        url, form = presigned["url"], dict(presigned["fields"])
    form.update(extra or {})
    if tamper:
        form["x-amz-signature"] = "0" * 64
    return send_form(url, form, filename, data)


sides = {
    "portico": (through, bucket_through, portico_url, portico_key, portico_secret),
    "minio": (direct, bucket_direct, minio_url, minio_key, minio_secret),
}


def both(name, key, data, **kwargs):
    """The same case on both sides: (portico's answer, minio's answer), which agree."""
    # boto3 adds to the conditions it is given: each side gets its own copy.
    answers = {side: post(sides[side], key, data, **copy.deepcopy(kwargs)) for side in sides}
    got, want = answers["portico"], answers["minio"]
    assert (got.status_code, code_of(got)) == (want.status_code, code_of(want)), (
        name, got.status_code, got.text[:400], want.status_code, want.text[:400])
    print(f"{name}: {got.status_code} {code_of(got) or ''} ok", flush=True)
    return got, want


def stored(key, bucket=bucket_through, s3=None):
    output = (s3 or reader).get_object(Bucket=bucket, Key=key)
    return output["Body"].read(), output


# 1. A plain upload, read back through Portico; an overwrite of a key Portico has cached.
data = b"first form upload\n" * 100
both("plain upload", "form/upload.txt", data)
assert stored("form/upload.txt")[0] == data
again = b"second form upload\n" * 50
both("overwrite of a cached key", "form/upload.txt", again)
assert stored("form/upload.txt")[0] == again, "the cached version was served after the POST"

# 2. `${filename}`, a prefix condition, metadata and a content type (field names in any
#    case), and answers as S3 gives them: 201 with a document, 303 to a redirect.
fields = {"Content-Type": "text/csv", "x-amz-meta-owner": "web", "success_action_status": "201"}
conditions = [["starts-with", "$key", "named/"], {"content-type": "text/csv"},
              {"x-amz-meta-owner": "web"}, {"success_action_status": "201"}]
got, want = both("filename, fields and 201", "named/${filename}", b"a,b\n1,2\n",
                 fields=fields, conditions=conditions, filename="table.csv")
assert "<Key>named/table.csv</Key>" in got.text, got.text
body, output = stored("named/table.csv")
assert body == b"a,b\n1,2\n" and output["ContentType"] == "text/csv", output
assert output["Metadata"] == {"owner": "web"}, output["Metadata"]
redirect = "https://example.com/done"
got, want = both("redirect", "form/redirected.txt", b"x",
                 fields={"success_action_redirect": redirect},
                 conditions=[{"success_action_redirect": redirect}])
assert got.status_code == 303 and got.headers["Location"].startswith(redirect), got.headers
assert "key=form%2Fredirected.txt" in got.headers["Location"], got.headers["Location"]

# 3. Each kind of broken form (authentication on: refused by the policy's rules).
if mode == "sigv4":
    both("file over the length range", "form/big.bin", b"z" * 100,
         conditions=[["content-length-range", 1, 10]])
    both("file within the length range", "form/small.bin", b"z" * 5,
         conditions=[["content-length-range", 1, 10]])
    both("expired policy", "form/late.txt", b"late", expired=True)
    both("wrong signature", "form/forged.txt", b"forged", tamper=True)
    both("a field no condition names", "form/extra.txt", b"extra",
         extra={"x-amz-meta-sneaky": "1"})
    both("a key outside the prefix", "elsewhere/x.txt", b"x",
         conditions=[["starts-with", "$key", "named/"]], extra={})
    for key in ("form/late.txt", "form/forged.txt", "form/extra.txt", "form/big.bin"):
        try:
            reader.head_object(Bucket=bucket_through, Key=key)
        except Exception:
            continue
        raise AssertionError(f"{key} was stored by a refused form")
    print("broken forms ok", flush=True)

print("post uploads ok", flush=True)
