"""boto3 through Portico: put/get/head/list/delete, multipart upload, presigned GET and PUT
with urllib. Every object read back is compared with what was written, and with MinIO
direct. Prints one line per step; any mismatch raises (non-zero exit)."""

import hashlib
import io
import os
import sys
import urllib.request

import boto3
from botocore.config import Config

portico_url, minio_url, access_key, secret_key, bucket = sys.argv[1:6]


def client(endpoint):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        region_name="us-east-1",
        # Presigned URLs default to SigV2 in us-east-1; Portico, like S3 in every region
        # opened since 2014, accepts SigV4 only.
        config=Config(
            s3={"addressing_style": "path"},
            retries={"max_attempts": 1},
            signature_version="s3v4",
        ),
    )


portico = client(portico_url)
direct = client(minio_url)
digest = lambda data: hashlib.sha256(data).hexdigest()

small = os.urandom(1024)
portico.put_object(Bucket=bucket, Key="boto3/small.bin", Body=small, ContentType="application/x-test")
assert portico.get_object(Bucket=bucket, Key="boto3/small.bin")["Body"].read() == small
head = portico.head_object(Bucket=bucket, Key="boto3/small.bin")
assert head["ContentLength"] == 1024 and head["ContentType"] == "application/x-test", head
assert head["ETag"] == '"%s"' % hashlib.md5(small).hexdigest(), head["ETag"]
print("put/get/head ok")

# A stream body goes as aws-chunked with a trailing checksum; the object keeps its gzip
# Content-Encoding, and the aws-chunked coding is dropped.
portico.put_object(Bucket=bucket, Key="boto3/data.gz", Body=io.BytesIO(small), ContentEncoding="gzip")
for source in (portico, direct):
    got = source.get_object(Bucket=bucket, Key="boto3/data.gz")
    assert got["ContentEncoding"] == "gzip", got["ContentEncoding"]
    assert got["Body"].read() == small
print("gzip ok")

# A plain body that names aws-chunked in its Content-Encoding: S3 frames it by
# x-amz-content-sha256 and stores the object's own coding only.
for declared, stored in (("gzip, aws-chunked", "gzip"), ("aws-chunked, gzip", "gzip"), ("aws-chunked", None)):
    portico.put_object(Bucket=bucket, Key="boto3/declared.bin", Body=small, ContentEncoding=declared)
    for source in (portico, direct):
        got = source.get_object(Bucket=bucket, Key="boto3/declared.bin")
        assert got.get("ContentEncoding") == stored, (declared, got.get("ContentEncoding"))
        assert got["Body"].read() == small, declared
portico.delete_object(Bucket=bucket, Key="boto3/declared.bin")
print("declared aws-chunked ok")

# upload_fileobj sends a multipart upload above its 8 MiB threshold.
large = os.urandom(20 * 1024 * 1024 + 5)
portico.upload_fileobj(io.BytesIO(large), bucket, "boto3/large.bin")
etag = portico.head_object(Bucket=bucket, Key="boto3/large.bin")["ETag"]
assert etag.endswith('-3"'), etag
assert digest(portico.get_object(Bucket=bucket, Key="boto3/large.bin")["Body"].read()) == digest(large)
assert digest(direct.get_object(Bucket=bucket, Key="boto3/large.bin")["Body"].read()) == digest(large)
print("multipart ok", etag)

keys = [item["Key"] for item in portico.list_objects_v2(Bucket=bucket, Prefix="boto3/")["Contents"]]
assert keys == ["boto3/data.gz", "boto3/large.bin", "boto3/small.bin"], keys
print("list ok")

url = portico.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "boto3/presigned.txt"}, ExpiresIn=300)
request = urllib.request.Request(url, data=b"presigned upload", method="PUT")
try:
    assert urllib.request.urlopen(request).status == 200
except urllib.error.HTTPError as error:
    raise AssertionError(f"presigned PUT {url}: {error.code} {error.read()!r}")
url = portico.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "boto3/presigned.txt"}, ExpiresIn=300)
assert urllib.request.urlopen(url).read() == b"presigned upload"
assert direct.get_object(Bucket=bucket, Key="boto3/presigned.txt")["Body"].read() == b"presigned upload"
print("presigned ok")

portico.delete_object(Bucket=bucket, Key="boto3/presigned.txt")
portico.delete_object(Bucket=bucket, Key="boto3/data.gz")
portico.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "boto3/small.bin"}, {"Key": "boto3/large.bin"}]})
assert "Contents" not in direct.list_objects_v2(Bucket=bucket, Prefix="boto3/")
try:
    portico.get_object(Bucket=bucket, Key="boto3/small.bin")
    raise AssertionError("a deleted object was still served")
except portico.exceptions.NoSuchKey:
    pass
print("delete ok")
