package portico;

import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.List;
import java.util.Random;
import java.util.TreeSet;
import java.util.zip.CRC32;

import software.amazon.awssdk.auth.credentials.AwsBasicCredentials;
import software.amazon.awssdk.auth.credentials.StaticCredentialsProvider;
import software.amazon.awssdk.core.async.AsyncRequestBody;
import software.amazon.awssdk.core.async.AsyncResponseTransformer;
import software.amazon.awssdk.core.sync.RequestBody;
import software.amazon.awssdk.regions.Region;
import software.amazon.awssdk.services.s3.S3AsyncClient;
import software.amazon.awssdk.services.s3.S3Client;
import software.amazon.awssdk.services.s3.model.ChecksumMode;
import software.amazon.awssdk.services.s3.model.CompletedMultipartUpload;
import software.amazon.awssdk.services.s3.model.CompletedPart;
import software.amazon.awssdk.services.s3.model.GetObjectRequest;
import software.amazon.awssdk.services.s3.model.HeadObjectResponse;
import software.amazon.awssdk.services.s3.model.ListObjectsV2Request;
import software.amazon.awssdk.services.s3.model.NoSuchKeyException;
import software.amazon.awssdk.services.s3.model.PutObjectRequest;
import software.amazon.awssdk.services.s3.model.S3Object;
import software.amazon.awssdk.services.s3.model.UploadPartResponse;

/**
 * The AWS SDK for Java v2 through Portico, at its default settings: the plain S3Client
 * (Apache HTTP client) and the CRT-based S3AsyncClient, each writing with the SDK's default
 * checksums (a signed aws-chunked body with a trailing CRC32 over http://), a multipart
 * upload, HEAD, GET, ranged GETs, a listing and a delete. Every object is checked byte for
 * byte against MinIO direct. Prints one line per step; any mismatch exits non-zero.
 *
 * Arguments: portico-endpoint minio-endpoint access-key secret-key bucket client...
 * where each client is "sync" or "crt".
 */
public final class JavaClient {
    private static final int MIB = 1024 * 1024;

    /** The operations a test runs, the same for both clients. */
    private interface Client extends AutoCloseable {
        void put(String key, byte[] data);

        /** An upload of several parts: explicit for the sync client, the CRT's own above its part size. */
        void putMultipart(String key, byte[] data);

        HeadObjectResponse head(String key);

        byte[] get(String key, String range);

        List<String> list(String prefix);

        void delete(String key);

        @Override
        void close();
    }

    private static final class Sync implements Client {
        private final S3Client s3;
        private final String bucket;

        Sync(S3Client s3, String bucket) {
            this.s3 = s3;
            this.bucket = bucket;
        }

        public void put(String key, byte[] data) {
            s3.putObject(PutObjectRequest.builder().bucket(bucket).key(key).build(), RequestBody.fromBytes(data));
        }

        public void putMultipart(String key, byte[] data) {
            String uploadId = s3.createMultipartUpload(b -> b.bucket(bucket).key(key)).uploadId();
            List<CompletedPart> parts = new ArrayList<>();
            int partBytes = 5 * MIB;
            for (int offset = 0, number = 1; offset < data.length; offset += partBytes, number++) {
                byte[] part = Arrays.copyOfRange(data, offset, Math.min(data.length, offset + partBytes));
                final int partNumber = number;
                UploadPartResponse uploaded = s3.uploadPart(
                    b -> b.bucket(bucket).key(key).uploadId(uploadId).partNumber(partNumber),
                    RequestBody.fromBytes(part));
                parts.add(CompletedPart.builder().partNumber(partNumber).eTag(uploaded.eTag())
                    .checksumCRC32(uploaded.checksumCRC32()).build());
            }
            s3.completeMultipartUpload(b -> b.bucket(bucket).key(key).uploadId(uploadId)
                .multipartUpload(CompletedMultipartUpload.builder().parts(parts).build()));
        }

        public HeadObjectResponse head(String key) {
            return s3.headObject(b -> b.bucket(bucket).key(key));
        }

        public byte[] get(String key, String range) {
            return s3.getObjectAsBytes(GetObjectRequest.builder().bucket(bucket).key(key).range(range).build())
                .asByteArray();
        }

        public List<String> list(String prefix) {
            List<String> keys = new ArrayList<>();
            for (S3Object object : s3.listObjectsV2Paginator(
                    ListObjectsV2Request.builder().bucket(bucket).prefix(prefix).maxKeys(2).build()).contents()) {
                keys.add(object.key());
            }
            return keys;
        }

        public void delete(String key) {
            s3.deleteObject(b -> b.bucket(bucket).key(key));
        }

        public void close() {
            s3.close();
        }
    }

    private static final class Crt implements Client {
        private final S3AsyncClient s3;
        private final String bucket;

        Crt(S3AsyncClient s3, String bucket) {
            this.s3 = s3;
            this.bucket = bucket;
        }

        public void put(String key, byte[] data) {
            s3.putObject(PutObjectRequest.builder().bucket(bucket).key(key).build(), AsyncRequestBody.fromBytes(data))
                .join();
        }

        public void putMultipart(String key, byte[] data) {
            put(key, data);
        }

        public HeadObjectResponse head(String key) {
            return s3.headObject(b -> b.bucket(bucket).key(key)).join();
        }

        public byte[] get(String key, String range) {
            return s3.getObject(GetObjectRequest.builder().bucket(bucket).key(key).range(range).build(),
                AsyncResponseTransformer.toBytes()).join().asByteArray();
        }

        public List<String> list(String prefix) {
            List<String> keys = new ArrayList<>();
            String token = null;
            do {
                final String continuation = token;
                var page = s3.listObjectsV2(b -> b.bucket(bucket).prefix(prefix).maxKeys(2)
                    .continuationToken(continuation)).join();
                page.contents().forEach(object -> keys.add(object.key()));
                token = page.nextContinuationToken();
            } while (token != null);
            return keys;
        }

        public void delete(String key) {
            s3.deleteObject(b -> b.bucket(bucket).key(key)).join();
        }

        public void close() {
            s3.close();
        }
    }

    private static void check(boolean condition, String what) {
        if (!condition) {
            throw new AssertionError(what);
        }
    }

    private static byte[] random(int length, long seed) {
        byte[] data = new byte[length];
        new Random(seed).nextBytes(data);
        return data;
    }

    private static String crc32(byte[] data) {
        CRC32 crc = new CRC32();
        crc.update(data);
        long value = crc.getValue();
        byte[] bytes = {(byte) (value >>> 24), (byte) (value >>> 16), (byte) (value >>> 8), (byte) value};
        return Base64.getEncoder().encodeToString(bytes);
    }

    private static String md5Etag(byte[] data) throws Exception {
        StringBuilder hex = new StringBuilder("\"");
        for (byte b : MessageDigest.getInstance("MD5").digest(data)) {
            hex.append(String.format("%02x", b));
        }
        return hex.append('"').toString();
    }

    public static void main(String[] args) throws Exception {
        String portico = args[0];
        String minio = args[1];
        var credentials = StaticCredentialsProvider.create(AwsBasicCredentials.create(args[2], args[3]));
        String bucket = args[4];
        S3Client direct = S3Client.builder().endpointOverride(URI.create(minio)).region(Region.US_EAST_1)
            .credentialsProvider(credentials).forcePathStyle(true).build();

        for (String kind : Arrays.copyOfRange(args, 5, args.length)) {
            Client client = switch (kind) {
                case "sync" -> new Sync(S3Client.builder().endpointOverride(URI.create(portico))
                    .region(Region.US_EAST_1).credentialsProvider(credentials).forcePathStyle(true).build(), bucket);
                case "crt" -> new Crt(S3AsyncClient.crtBuilder().endpointOverride(URI.create(portico))
                    .region(Region.US_EAST_1).credentialsProvider(credentials).forcePathStyle(true)
                    .minimumPartSizeInBytes(5L * MIB).build(), bucket);
                default -> throw new IllegalArgumentException("unknown client " + kind);
            };
            try (client) {
                run(kind, client, direct, bucket);
            }
        }
        direct.close();
    }

    private static void run(String kind, Client client, S3Client direct, String bucket) throws Exception {
        String prefix = "java-" + kind + "/";
        byte[] small = random(MIB + 17, 1);
        byte[] large = random(12 * MIB + 5, 2);
        String smallKey = prefix + "small.bin";
        String largeKey = prefix + "large.bin";

        client.put(smallKey, small);
        HeadObjectResponse stored = direct.headObject(b -> b.bucket(bucket).key(smallKey)
            .checksumMode(ChecksumMode.ENABLED));
        check(Arrays.equals(direct.getObjectAsBytes(b -> b.bucket(bucket).key(smallKey)).asByteArray(), small),
            kind + ": the origin holds the bytes written");
        check(crc32(small).equals(stored.checksumCRC32()),
            kind + ": the origin stored the CRC32 the SDK sent, got " + stored.checksumCRC32());
        System.out.println(kind + " put ok");

        client.putMultipart(largeKey, large);
        String largeEtag = direct.headObject(b -> b.bucket(bucket).key(largeKey)).eTag();
        check(largeEtag.endsWith("-3\""), kind + ": a 12 MiB upload in 5 MiB parts has 3 parts, ETag " + largeEtag);
        check(Arrays.equals(direct.getObjectAsBytes(b -> b.bucket(bucket).key(largeKey)).asByteArray(), large),
            kind + ": the origin holds the multipart bytes");
        System.out.println(kind + " multipart ok");

        HeadObjectResponse head = client.head(smallKey);
        check(head.contentLength() == small.length, kind + ": HEAD length " + head.contentLength());
        check(head.eTag().equals(md5Etag(small)), kind + ": HEAD ETag " + head.eTag());
        System.out.println(kind + " head ok");

        check(Arrays.equals(client.get(smallKey, null), small), kind + ": GET of the small object");
        check(Arrays.equals(client.get(largeKey, null), large), kind + ": GET of the multipart object");
        System.out.println(kind + " get ok");

        int from = 4 * MIB - 100;
        check(Arrays.equals(client.get(largeKey, "bytes=" + from + "-" + (from + 999)),
            Arrays.copyOfRange(large, from, from + 1000)), kind + ": a range across a block edge");
        check(Arrays.equals(client.get(largeKey, "bytes=-300"),
            Arrays.copyOfRange(large, large.length - 300, large.length)), kind + ": a suffix range");
        System.out.println(kind + " range ok");

        client.put(prefix + "text.txt", "hello from java".getBytes(StandardCharsets.UTF_8));
        TreeSet<String> listed = new TreeSet<>(client.list(prefix));
        TreeSet<String> expected = new TreeSet<>(List.of(smallKey, largeKey, prefix + "text.txt"));
        check(listed.equals(expected), kind + ": listing " + listed);
        System.out.println(kind + " list ok");

        for (String key : expected) {
            client.delete(key);
        }
        for (String key : expected) {
            try {
                direct.headObject(b -> b.bucket(bucket).key(key));
                throw new AssertionError(kind + ": " + key + " is still at the origin");
            } catch (NoSuchKeyException gone) {
                // deleted, as expected
            }
            try {
                client.head(key);
                throw new AssertionError(kind + ": " + key + " is still readable through Portico");
            } catch (NoSuchKeyException gone) {
                // deleted, as expected
            } catch (java.util.concurrent.CompletionException gone) {
                check(gone.getCause() instanceof NoSuchKeyException, kind + ": HEAD after delete: " + gone);
            }
        }
        check(client.list(prefix).isEmpty(), kind + ": nothing listed after the deletes");
        System.out.println(kind + " delete ok");
    }

    private JavaClient() {}
}
