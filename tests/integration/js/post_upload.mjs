// A browser form upload through Portico with the AWS SDK for JavaScript v3:
// createPresignedPost, then the form sent with fetch and FormData, as a web page sends it.
// The key is written first with PutObject and read (so Portico caches it), then replaced
// by the form upload, then read again: the upload's bytes, its content type and metadata.
// Prints one line per step; any mismatch exits non-zero.
//
// Arguments: endpoint access_key secret_key bucket key

import { createPresignedPost } from "@aws-sdk/s3-presigned-post";
import { GetObjectCommand, PutObjectCommand, S3Client } from "@aws-sdk/client-s3";

const [endpoint, accessKeyId, secretAccessKey, bucket, key] = process.argv.slice(2);
const client = new S3Client({
  endpoint,
  region: "us-east-1",
  forcePathStyle: true,
  credentials: { accessKeyId, secretAccessKey },
});

async function read() {
  const output = await client.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
  return { body: Buffer.from(await output.Body.transformToByteArray()), output };
}

function check(condition, what) {
  if (!condition) {
    console.error(`FAILED: ${what}`);
    process.exit(1);
  }
}

await client.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: "the old version" }));
check((await read()).body.toString() === "the old version", "the old version reads back");

const data = Buffer.from("uploaded from a browser form\n".repeat(1000));
const { url, fields } = await createPresignedPost(client, {
  Bucket: bucket,
  Key: key,
  Conditions: [["content-length-range", 1, 1048576], { "x-amz-meta-origin": "browser" }],
  Fields: { "Content-Type": "text/plain", "x-amz-meta-origin": "browser" },
  Expires: 600,
});
const form = new FormData();
for (const [name, value] of Object.entries(fields)) {
  form.append(name, value);
}
form.append("file", new Blob([data]), "upload.txt");
const response = await fetch(url, { method: "POST", body: form });
console.log(`post status ${response.status}`);
check(response.status === 204, `the form upload: ${response.status} ${await response.text()}`);

const { body, output } = await read();
check(body.equals(data), "the form upload's bytes read back, not the cached old version");
check(output.ContentType === "text/plain", `content type ${output.ContentType}`);
check(output.Metadata.origin === "browser", `metadata ${JSON.stringify(output.Metadata)}`);

const big = Buffer.alloc(2 * 1048576, 7);
const tooBig = new FormData();
for (const [name, value] of Object.entries(fields)) {
  tooBig.append(name, value);
}
tooBig.append("file", new Blob([big]), "big.bin");
const refused = await fetch(url, { method: "POST", body: tooBig });
const text = await refused.text();
check(refused.status === 400 && text.includes("EntityTooLarge"), `too large: ${refused.status} ${text}`);
check((await read()).body.equals(data), "a refused upload changes nothing");
console.log("js post upload ok");
