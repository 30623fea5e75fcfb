package io.slash.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;

import com.google.flatbuffers.FlatBufferBuilder;
import org.apache.arrow.flatbuf.Message;
import org.apache.arrow.flatbuf.MessageHeader;
import org.apache.arrow.flatbuf.MetadataVersion;
import org.apache.arrow.flatbuf.RecordBatch;
import org.apache.arrow.vector.ipc.WriteChannel;
import org.apache.arrow.vector.ipc.message.ArrowBlock;
import org.apache.arrow.vector.ipc.message.ArrowFooter;
import org.apache.arrow.vector.ipc.message.MessageSerializer;
import org.apache.arrow.vector.types.DateUnit;
import org.apache.arrow.vector.types.FloatingPointPrecision;
import org.apache.arrow.vector.types.TimeUnit;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.FieldType;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.SparkEnv;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.function.Function2;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.classic.Dataset;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Writes the rows of any DataFrame as Arrow IPC files in the Spark tasks that
 * compute them, for Slash's fast path (python/slash/file_source.py reads them
 * as a FileSource), so that no row passes from the JVM to Python.
 *
 * <p>{@link #export} runs one Spark job over {@code df.queryExecution().toRdd()}:
 * one task per partition of the DataFrame, whatever their number, and no
 * shuffle. Each task writes its partition into {@code DIR/part-PPPPP-A.arrow}
 * (P the partition, A the task attempt): the Arrow IPC file format, record
 * batches of up to {@code batchRows} rows (fewer for wide rows, see
 * {@link #BATCH_BYTES}), written under a hidden name ({@code .part-...},
 * which readers skip) and renamed when complete, so a listed file is always
 * whole. Every partition gets a file, an empty one
 * holding the schema alone.
 *
 * <p>Values are copied from each row's memory into per-column heap buffers
 * laid out as Arrow's (validity bitmap, int32 offsets and bytes for strings,
 * values for the rest: little-endian, as the JVM's Platform writes them); a
 * full batch's buffers go to the file as they are. Per value: a switch on the
 * column's kind, no allocation, no call through Spark's ArrowWriter.
 *
 * <p>Types: boolean, byte, short, int, long, float, double (NaN kept), date
 * (date32), timestamp (timestamp[us, UTC]: Spark's instants, whatever the
 * session time zone), timestamp_ntz (timestamp[us]), string (utf8), binary.
 * Any other column is refused before the job starts, naming it.
 */
public final class ArrowExport {

    private ArrowExport() {
    }

    // how a column's values are copied (the Arrow type is chosen apart: a date is an INT)
    static final int BOOL = 0;
    static final int BYTE = 1;
    static final int SHORT = 2;
    static final int INT = 3;
    static final int LONG = 4;
    static final int FLOAT = 5;
    static final int DOUBLE = 6;
    static final int STRING = 7;
    static final int BINARY = 8;
    // Arrow types beyond a kind's plain one
    static final int PLAIN = 0;
    static final int DATE = 1;
    static final int TIMESTAMP_UTC = 2;
    static final int TIMESTAMP_NTZ = 3;

    /**
     * Bytes of one record batch's fixed-width buffers (counting 12 per string value) that
     * bound its rows below {@code batchRows}: a wide row makes shorter batches, so that a
     * task's buffers stay a small part of the executor's heap.
     */
    static final long BATCH_BYTES = 64L << 20;

    /** A record batch is cut before its string bytes in one column would pass this. */
    static final int MAX_VAR_BYTES = 1 << 28;

    /** Bytes handed to the file channel at a time (the JDK copies a heap buffer through a direct one). */
    private static final int WRITE_CHUNK = 4 << 20;

    private static final byte[] MAGIC = {'A', 'R', 'R', 'O', 'W', '1'};

    /**
     * Exports every column of {@code df} into Arrow IPC files under
     * {@code dir} (a directory of each executor's local file system, made if
     * missing), one per partition.
     *
     * @return one JSON object per partition, in partition order, as a JSON
     *     array: {@code {"partition": P, "rows": N, "batches": B, "bytes": S,
     *     "host": H, "path": F}}
     * @throws IllegalArgumentException naming a column whose type is not taken,
     *     or for batchRows below 1
     */
    public static String export(Dataset<?> df, String dir, int batchRows) {
        if (batchRows < 1) {
            throw new IllegalArgumentException("batchRows must be at least 1, got " + batchRows);
        }
        StructField[] fields = df.schema().fields();
        int n = fields.length;
        String[] names = new String[n];
        boolean[] nullable = new boolean[n];
        int[] kinds = new int[n];
        int[] types = new int[n];
        for (int i = 0; i < n; i++) {
            names[i] = fields[i].name();
            nullable[i] = fields[i].nullable();
            int[] kt = kindOf(fields[i].name(), fields[i].dataType());
            kinds[i] = kt[0];
            types[i] = kt[1];
        }
        long rowBytes = 0;
        for (int k : kinds) {
            rowBytes += width(k) < 0 ? 12 : Math.max(1, width(k));
        }
        int rows = (int) Math.max(1, Math.min(batchRows, BATCH_BYTES / Math.max(1, rowBytes)));
        PartitionWriter w = new PartitionWriter(dir, names, nullable, kinds, types, rows);
        List<String> parts = df.queryExecution().toRdd().toJavaRDD()
                .mapPartitionsWithIndex(w, false).collect();
        return "[" + String.join(",", parts) + "]";
    }

    /** The types {@link #export} takes, as the error messages name them. */
    public static String supportedTypes() {
        return "boolean, tinyint, smallint, int, bigint, float, double, date, timestamp, "
                + "timestamp_ntz, string, binary";
    }

    static int[] kindOf(String name, DataType t) {
        if (t instanceof BooleanType) {
            return new int[] {BOOL, PLAIN};
        } else if (t instanceof ByteType) {
            return new int[] {BYTE, PLAIN};
        } else if (t instanceof ShortType) {
            return new int[] {SHORT, PLAIN};
        } else if (t instanceof IntegerType) {
            return new int[] {INT, PLAIN};
        } else if (t instanceof DateType) {
            return new int[] {INT, DATE};
        } else if (t instanceof LongType) {
            return new int[] {LONG, PLAIN};
        } else if (t instanceof TimestampType) {
            return new int[] {LONG, TIMESTAMP_UTC};
        } else if (t instanceof TimestampNTZType) {
            return new int[] {LONG, TIMESTAMP_NTZ};
        } else if (t instanceof FloatType) {
            return new int[] {FLOAT, PLAIN};
        } else if (t instanceof DoubleType) {
            return new int[] {DOUBLE, PLAIN};
        } else if (t instanceof StringType) {
            return new int[] {STRING, PLAIN};
        } else if (t instanceof BinaryType) {
            return new int[] {BINARY, PLAIN};
        }
        throw new IllegalArgumentException("column '" + name + "' has type " + t.simpleString()
                + ", which the Arrow export does not take (it takes " + supportedTypes() + ")");
    }

    static ArrowType arrowType(int kind, int type) {
        switch (kind) {
            case BOOL: return ArrowType.Bool.INSTANCE;
            case BYTE: return new ArrowType.Int(8, true);
            case SHORT: return new ArrowType.Int(16, true);
            case INT: return type == DATE ? new ArrowType.Date(DateUnit.DAY) : new ArrowType.Int(32, true);
            case LONG:
                if (type == TIMESTAMP_UTC) {
                    return new ArrowType.Timestamp(TimeUnit.MICROSECOND, "UTC");
                }
                return type == TIMESTAMP_NTZ ? new ArrowType.Timestamp(TimeUnit.MICROSECOND, null)
                        : new ArrowType.Int(64, true);
            case FLOAT: return new ArrowType.FloatingPoint(FloatingPointPrecision.SINGLE);
            case DOUBLE: return new ArrowType.FloatingPoint(FloatingPointPrecision.DOUBLE);
            case STRING: return ArrowType.Utf8.INSTANCE;
            case BINARY: return ArrowType.Binary.INSTANCE;
            default: throw new IllegalStateException("kind " + kind);
        }
    }

    /** Bytes per value of a fixed-width kind (0: bits, for booleans; -1: variable). */
    static int width(int kind) {
        switch (kind) {
            case BOOL: return 0;
            case BYTE: return 1;
            case SHORT: return 2;
            case INT: case FLOAT: return 4;
            case LONG: case DOUBLE: return 8;
            default: return -1;
        }
    }

    /** One column's buffers for the batch being filled, reused batch after batch. */
    static final class Column {
        final int kind;
        final int width;
        byte[] validity;
        byte[] values;   // fixed-width values, or a variable column's bytes
        byte[] offsets;  // a variable column's int32 offsets
        int bytes;       // a variable column's bytes used

        Column(int kind, int rows) {
            this.kind = kind;
            this.width = width(kind);
            validity = new byte[(rows + 7) >>> 3];
            if (width > 0) {
                values = new byte[rows * width];
            } else if (width == 0) {
                values = new byte[(rows + 7) >>> 3];
            } else {
                offsets = new byte[(rows + 1) * 4];
                values = new byte[Math.max(1024, rows * 8)];
            }
        }

        void reset(int rows) {
            Arrays.fill(validity, 0, (rows + 7) >>> 3, (byte) 0);
            if (width == 0) {
                Arrays.fill(values, 0, (rows + 7) >>> 3, (byte) 0);
            }
            bytes = 0;
        }

        /** Nulls among the first {@code rows} rows: those whose validity bit is not set. */
        int nulls(int rows) {
            int set = 0;
            int whole = rows >>> 3;
            for (int i = 0; i < whole; i++) {
                set += Integer.bitCount(validity[i] & 0xff);
            }
            if ((rows & 7) != 0) {
                set += Integer.bitCount(validity[whole] & ((1 << (rows & 7)) - 1));
            }
            return rows - set;
        }

        /** Room for {@code more} bytes of a variable column; false when the batch must end first. */
        boolean reserve(int more) {
            long need = (long) bytes + more;
            if (need > MAX_VAR_BYTES && bytes > 0) {
                return false;
            }
            if (need > values.length) {
                long grown = Math.max(need, Math.min((long) values.length * 2, Integer.MAX_VALUE - 16));
                if (grown > Integer.MAX_VALUE - 16) {
                    throw new IllegalStateException("a value of " + more + " bytes does not fit a record batch");
                }
                values = Arrays.copyOf(values, (int) grown);
            }
            return true;
        }

        /** Copies {@code size} bytes at (base, offset) as row r's value. */
        boolean putBytes(int r, Object base, long offset, int size) {
            if (!reserve(size)) {
                return false;
            }
            Platform.copyMemory(base, offset, values, Platform.BYTE_ARRAY_OFFSET + bytes, size);
            bytes += size;
            Platform.putInt(offsets, Platform.BYTE_ARRAY_OFFSET + 4L * (r + 1), bytes);
            return true;
        }
    }

    /** The task: one partition's rows into one Arrow IPC file. */
    static final class PartitionWriter
            implements Function2<Integer, Iterator<InternalRow>, Iterator<String>> {
        private static final long serialVersionUID = 1L;

        final String dir;
        final String[] names;
        final boolean[] nullable;
        final int[] kinds;
        final int[] types;
        final int batchRows;

        PartitionWriter(String dir, String[] names, boolean[] nullable, int[] kinds, int[] types,
                        int batchRows) {
            this.dir = dir;
            this.names = names;
            this.nullable = nullable;
            this.kinds = kinds;
            this.types = types;
            this.batchRows = batchRows;
        }

        Schema schema() {
            List<Field> fields = new ArrayList<>();
            for (int i = 0; i < names.length; i++) {
                fields.add(new Field(names[i], new FieldType(nullable[i], arrowType(kinds[i], types[i]), null),
                        Collections.emptyList()));
            }
            return new Schema(fields);
        }

        @Override
        public Iterator<String> call(Integer partition, Iterator<InternalRow> rows) throws IOException {
            TaskContext ctx = TaskContext.get();
            int attempt = ctx == null ? 0 : ctx.attemptNumber();
            Path d = Paths.get(dir);
            Files.createDirectories(d);
            String name = String.format("part-%05d-%d.arrow", partition, attempt);
            Path tmp = d.resolve("." + name + ".tmp");
            Path done = d.resolve(name);
            FileWriter fw = new FileWriter(tmp, schema(), kinds, batchRows);
            try {
                fw.writeAll(rows);
                fw.finish();
            } catch (IOException | RuntimeException e) {
                fw.abandon();
                throw e;
            }
            Files.move(tmp, done, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
            String host = SparkEnv.get() == null ? "" : SparkEnv.get().blockManager().blockManagerId().host();
            String line = "{\"partition\":" + partition + ",\"rows\":" + fw.rows + ",\"batches\":"
                    + fw.blocks.size() + ",\"bytes\":" + fw.out.getCurrentPosition() + ",\"host\":"
                    + json(host) + ",\"path\":" + json(done.toAbsolutePath().toString()) + "}";
            return Collections.singletonList(line).iterator();
        }
    }

    /** An Arrow IPC file being written: magic, schema, record batches, footer. */
    static final class FileWriter {
        final FileChannel channel;
        final WriteChannel out;
        final Path path;
        final Schema schema;
        final int[] kinds;
        final Column[] cols;
        final int batchRows;
        final List<ArrowBlock> blocks = new ArrayList<>();
        long rows;
        int n;  // rows in the batch being filled

        FileWriter(Path path, Schema schema, int[] kinds, int batchRows) throws IOException {
            this.path = path;
            this.schema = schema;
            this.kinds = kinds;
            this.batchRows = batchRows;
            channel = FileChannel.open(path, StandardOpenOption.CREATE, StandardOpenOption.WRITE,
                    StandardOpenOption.TRUNCATE_EXISTING);
            out = new WriteChannel(channel);
            cols = new Column[kinds.length];
            for (int i = 0; i < kinds.length; i++) {
                cols[i] = new Column(kinds[i], batchRows);
            }
            out.write(MAGIC);
            out.align();
            MessageSerializer.serialize(out, schema);
        }

        void writeAll(Iterator<InternalRow> rows) throws IOException {
            while (rows.hasNext()) {
                InternalRow row = rows.next();
                if (!append(row)) {  // a string column's bytes would pass MAX_VAR_BYTES
                    flush();
                    if (!append(row)) {
                        throw new IllegalStateException("a row does not fit an empty record batch");
                    }
                }
                if (n == batchRows) {
                    flush();
                }
            }
            flush();
        }

        /** Row {@code n} of the batch; false (nothing counted) when it must start the next batch. */
        boolean append(InternalRow row) {
            final int r = n;
            final UnsafeRow unsafe = row instanceof UnsafeRow ? (UnsafeRow) row : null;
            final int byteAt = r >>> 3;
            final byte bit = (byte) (1 << (r & 7));
            final long at = Platform.BYTE_ARRAY_OFFSET;
            for (int j = 0; j < cols.length; j++) {
                Column c = cols[j];
                if (row.isNullAt(j)) {
                    if (c.width < 0) {
                        Platform.putInt(c.offsets, at + 4L * (r + 1), c.bytes);
                    }
                    continue;
                }
                c.validity[byteAt] |= bit;
                switch (c.kind) {
                    case BOOL:
                        if (row.getBoolean(j)) {
                            c.values[byteAt] |= bit;
                        }
                        break;
                    case BYTE:
                        c.values[r] = row.getByte(j);
                        break;
                    case SHORT:
                        Platform.putShort(c.values, at + 2L * r, row.getShort(j));
                        break;
                    case INT:
                        Platform.putInt(c.values, at + 4L * r, row.getInt(j));
                        break;
                    case LONG:
                        Platform.putLong(c.values, at + 8L * r, row.getLong(j));
                        break;
                    case FLOAT:
                        Platform.putFloat(c.values, at + 4L * r, row.getFloat(j));
                        break;
                    case DOUBLE:
                        Platform.putDouble(c.values, at + 8L * r, row.getDouble(j));
                        break;
                    default: {  // STRING, BINARY: UnsafeRow's (offset, size) word, else the value's bytes
                        boolean fits;
                        if (unsafe != null) {
                            long word = unsafe.getLong(j);
                            fits = c.putBytes(r, unsafe.getBaseObject(),
                                    unsafe.getBaseOffset() + (int) (word >> 32), (int) word);
                        } else if (c.kind == STRING) {
                            UTF8String s = row.getUTF8String(j);
                            fits = c.putBytes(r, s.getBaseObject(), s.getBaseOffset(), s.numBytes());
                        } else {
                            byte[] b = row.getBinary(j);
                            fits = c.putBytes(r, b, Platform.BYTE_ARRAY_OFFSET, b.length);
                        }
                        if (!fits) {  // the row goes to the next batch: undo its bits here
                            for (Column k : cols) {
                                k.validity[byteAt] &= (byte) ~bit;
                                if (k.width == 0) {
                                    k.values[byteAt] &= (byte) ~bit;
                                }
                            }
                            return false;
                        }
                    }
                }
            }
            n++;
            return true;
        }

        /** Writes the batch being filled (if any row) as one record batch. */
        void flush() throws IOException {
            if (n == 0) {
                return;
            }
            // the body's buffers in Arrow's order, each padded to 8 bytes
            int nb = 0;
            for (Column c : cols) {
                nb += c.width < 0 ? 3 : 2;
            }
            byte[][] arrays = new byte[nb][];
            long[] lengths = new long[nb];
            int[] nulls = new int[cols.length];
            int b = 0;
            for (int j = 0; j < cols.length; j++) {
                Column c = cols[j];
                nulls[j] = c.nulls(n);
                arrays[b] = c.validity;
                lengths[b++] = nulls[j] == 0 ? 0 : (n + 7) >>> 3;
                if (c.width < 0) {
                    arrays[b] = c.offsets;
                    lengths[b++] = 4L * (n + 1);
                    arrays[b] = c.values;
                    lengths[b++] = c.bytes;
                } else {
                    arrays[b] = c.values;
                    lengths[b++] = c.width == 0 ? (n + 7) >>> 3 : (long) c.width * n;
                }
            }
            long[] offsets = new long[nb];
            long body = 0;
            for (int i = 0; i < nb; i++) {
                offsets[i] = body;
                body += pad8(lengths[i]);
            }
            FlatBufferBuilder fb = new FlatBufferBuilder(256 + 40 * nb);
            RecordBatch.startNodesVector(fb, cols.length);
            for (int i = cols.length - 1; i >= 0; i--) {
                org.apache.arrow.flatbuf.FieldNode.createFieldNode(fb, n, nulls[i]);
            }
            int nodes = fb.endVector();
            RecordBatch.startBuffersVector(fb, nb);
            for (int i = nb - 1; i >= 0; i--) {
                org.apache.arrow.flatbuf.Buffer.createBuffer(fb, offsets[i], lengths[i]);
            }
            int buffers = fb.endVector();
            RecordBatch.startRecordBatch(fb);
            RecordBatch.addLength(fb, n);
            RecordBatch.addNodes(fb, nodes);
            RecordBatch.addBuffers(fb, buffers);
            int batch = RecordBatch.endRecordBatch(fb);
            Message.startMessage(fb);
            Message.addVersion(fb, MetadataVersion.V5);
            Message.addHeaderType(fb, MessageHeader.RecordBatch);
            Message.addHeader(fb, batch);
            Message.addBodyLength(fb, body);
            fb.finish(Message.endMessage(fb));
            ByteBuffer meta = fb.dataBuffer();
            long start = out.getCurrentPosition();
            int metaLength = MessageSerializer.writeMessageBuffer(out, meta.remaining(), meta);
            for (int i = 0; i < nb; i++) {
                writeArray(arrays[i], lengths[i]);
                out.writeZeros(pad8(lengths[i]) - lengths[i]);
            }
            blocks.add(new ArrowBlock(start, metaLength, body));
            rows += n;
            n = 0;
            for (Column c : cols) {
                c.reset(batchRows);
            }
        }

        private void writeArray(byte[] a, long length) throws IOException {
            for (int off = 0; off < length; off += WRITE_CHUNK) {
                out.write(ByteBuffer.wrap(a, off, (int) Math.min(WRITE_CHUNK, length - off)));
            }
        }

        /** The end-of-stream marker, the footer (schema and batch positions), its length, the magic. */
        void finish() throws IOException {
            out.writeIntLittleEndian(MessageSerializer.IPC_CONTINUATION_TOKEN);
            out.writeIntLittleEndian(0);
            long footerStart = out.getCurrentPosition();
            out.write(new ArrowFooter(schema, Collections.emptyList(), blocks), false);
            out.writeIntLittleEndian((int) (out.getCurrentPosition() - footerStart));
            out.write(MAGIC);
            channel.close();
        }

        void abandon() {
            try {
                channel.close();
                Files.deleteIfExists(path);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
    }

    static long pad8(long x) {
        return (x + 7) & ~7L;
    }

    static String json(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (int i = 0; i < s.length(); i++) {
            char ch = s.charAt(i);
            if (ch == '"' || ch == '\\') {
                b.append('\\').append(ch);
            } else if (ch < 0x20) {
                b.append(String.format("\\u%04x", (int) ch));
            } else {
                b.append(ch);
            }
        }
        return b.append('"').toString();
    }
}
