/*
 * iolab's YCSB binding for RocksDB (rocksdbjni): the database behind iolab's `ycsb` workload.
 *
 * YCSB never published its RocksDB binding to Maven Central, so iolab ships this small one.
 * It follows the semantics of YCSB's own binding (site.ycsb.db.rocksdb.RocksDBClient):
 * one RocksDB shared by every client thread of the JVM (YCSB makes one DB object per
 * thread), update = read, merge the fields, write back (NOT_FOUND if the key is absent),
 * scan = iterate from the start key. It differs where iolab needs it to: the options that
 * decide what reaches the device are explicit properties, a record's fields are written
 * sorted by name, so the same record is always the same bytes, and a load ends with its data
 * flushed into table files (see cleanup()).
 *
 * Properties (all set by iolab on the command line):
 *   iolab.rocksdb.dir                 the database directory (created if missing)
 *   iolab.rocksdb.use_direct_reads    true: reads bypass the page cache (O_DIRECT)
 *   iolab.rocksdb.block_cache_bytes   size of RocksDB's own LRU block cache
 *   iolab.rocksdb.sync_writes         true: every write waits for fsync of the WAL
 *   iolab.rocksdb.compression         none | snappy | lz4 | zstd
 *   table                             YCSB's table name; the database holds that one table
 */
package iolab.ycsb;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.Vector;

import org.rocksdb.BlockBasedTableConfig;
import org.rocksdb.CompressionType;
import org.rocksdb.FlushOptions;
import org.rocksdb.LRUCache;
import org.rocksdb.Options;
import org.rocksdb.RocksDB;
import org.rocksdb.RocksDBException;
import org.rocksdb.RocksIterator;
import org.rocksdb.WriteOptions;

import site.ycsb.ByteArrayByteIterator;
import site.ycsb.ByteIterator;
import site.ycsb.DB;
import site.ycsb.DBException;
import site.ycsb.Status;

public class IolabRocksDbClient extends DB {
  static final String DIR = "iolab.rocksdb.dir";
  static final String DIRECT_READS = "iolab.rocksdb.use_direct_reads";
  static final String CACHE_BYTES = "iolab.rocksdb.block_cache_bytes";
  static final String SYNC_WRITES = "iolab.rocksdb.sync_writes";
  static final String COMPRESSION = "iolab.rocksdb.compression";

  // Shared by the client threads of this JVM; guarded by the class lock.
  private static RocksDB db;
  private static Options options;
  private static LRUCache cache;
  private static WriteOptions writeOptions;
  private static String openDir;
  private static int references;

  private String table;

  @Override
  public void init() throws DBException {
    Properties p = getProperties();
    table = p.getProperty("table", "usertable");
    synchronized (IolabRocksDbClient.class) {
      if (db == null) {
        open(p);
      }
      references++;
    }
  }

  /** Opens the shared database; every property is checked, so a typo fails instead of running defaults. */
  private static void open(Properties p) throws DBException {
    String dir = p.getProperty(DIR);
    if (dir == null || dir.isEmpty()) {
      throw new DBException("property " + DIR + " (the database directory) is required");
    }
    boolean directReads = bool(p, DIRECT_READS, false);
    long cacheBytes = longValue(p, CACHE_BYTES, 8L << 20);
    boolean sync = bool(p, SYNC_WRITES, false);
    CompressionType compression = compression(p.getProperty(COMPRESSION, "none"));
    RocksDB.loadLibrary();
    cache = new LRUCache(cacheBytes);
    BlockBasedTableConfig tableConfig = new BlockBasedTableConfig().setBlockCache(cache);
    options = new Options()
        .setCreateIfMissing(true)
        .setUseDirectReads(directReads)
        .setCompressionType(compression)
        .setTableFormatConfig(tableConfig);
    writeOptions = new WriteOptions().setSync(sync);
    try {
      db = RocksDB.open(options, dir);
    } catch (RocksDBException e) {
      closeAll();
      throw new DBException("cannot open RocksDB at " + dir + ": " + e.getMessage(), e);
    }
    openDir = dir;
    System.err.println("iolab-rocksdb: opened " + openDir + " (use_direct_reads=" + directReads
        + ", block_cache_bytes=" + cacheBytes + ", sync_writes=" + sync + ", compression=" + compression + ")");
  }

  /**
   * The last thread out closes the database. After a load (YCSB's -load sets dotransactions=false)
   * the memtables are flushed into table files first and waited for: the run phase then starts
   * from the loaded data in table files on the device, instead of replaying the WAL into new ones
   * while it opens (inside its own timing). After a run, closing does what RocksDB's close does.
   */
  @Override
  public void cleanup() throws DBException {
    synchronized (IolabRocksDbClient.class) {
      references--;
      if (references == 0 && db != null) {
        boolean load = "false".equals(getProperties().getProperty("dotransactions"));
        try (FlushOptions flush = new FlushOptions().setWaitForFlush(true)) {
          if (load) {
            db.flush(flush);
          }
        } catch (RocksDBException e) {
          throw new DBException("flushing the loaded data of " + openDir + " failed: " + e.getMessage(), e);
        } finally {
          closeAll();
        }
      }
    }
  }

  private static void closeAll() {
    if (db != null) {
      db.close();
      db = null;
    }
    for (AutoCloseable c : new AutoCloseable[] {writeOptions, options, cache}) {
      if (c != null) {
        try {
          c.close();
        } catch (Exception ignored) {
          // closing native handles: nothing left to do about a failure here
        }
      }
    }
    writeOptions = null;
    options = null;
    cache = null;
  }

  @Override
  public Status read(String tableName, String key, Set<String> fields, Map<String, ByteIterator> result) {
    if (!table.equals(tableName)) {
      return Status.NOT_IMPLEMENTED;
    }
    try {
      byte[] value = db.get(bytes(key));
      if (value == null) {
        return Status.NOT_FOUND;
      }
      decode(value, fields, result);
      return Status.OK;
    } catch (RocksDBException | IllegalArgumentException e) {
      System.err.println("iolab-rocksdb: read " + key + ": " + e.getMessage());
      return Status.ERROR;
    }
  }

  @Override
  public Status scan(String tableName, String startkey, int recordcount, Set<String> fields,
                     Vector<HashMap<String, ByteIterator>> result) {
    if (!table.equals(tableName)) {
      return Status.NOT_IMPLEMENTED;
    }
    try (RocksIterator it = db.newIterator()) {
      it.seek(bytes(startkey));
      for (int n = 0; n < recordcount && it.isValid(); n++, it.next()) {
        HashMap<String, ByteIterator> record = new HashMap<>();
        decode(it.value(), fields, record);
        result.add(record);
      }
      it.status();  // an I/O error during iteration ends it early: report it, not a short scan
      return Status.OK;
    } catch (RocksDBException | IllegalArgumentException e) {
      System.err.println("iolab-rocksdb: scan from " + startkey + ": " + e.getMessage());
      return Status.ERROR;
    }
  }

  @Override
  public Status update(String tableName, String key, Map<String, ByteIterator> values) {
    if (!table.equals(tableName)) {
      return Status.NOT_IMPLEMENTED;
    }
    try {
      byte[] old = db.get(bytes(key));
      if (old == null) {
        return Status.NOT_FOUND;
      }
      Map<String, ByteIterator> record = new HashMap<>();
      decode(old, null, record);
      record.putAll(values);
      db.put(writeOptions, bytes(key), encode(record));
      return Status.OK;
    } catch (RocksDBException | IllegalArgumentException e) {
      System.err.println("iolab-rocksdb: update " + key + ": " + e.getMessage());
      return Status.ERROR;
    }
  }

  @Override
  public Status insert(String tableName, String key, Map<String, ByteIterator> values) {
    if (!table.equals(tableName)) {
      return Status.NOT_IMPLEMENTED;
    }
    try {
      db.put(writeOptions, bytes(key), encode(values));
      return Status.OK;
    } catch (RocksDBException e) {
      System.err.println("iolab-rocksdb: insert " + key + ": " + e.getMessage());
      return Status.ERROR;
    }
  }

  @Override
  public Status delete(String tableName, String key) {
    if (!table.equals(tableName)) {
      return Status.NOT_IMPLEMENTED;
    }
    try {
      db.delete(writeOptions, bytes(key));
      return Status.OK;
    } catch (RocksDBException e) {
      System.err.println("iolab-rocksdb: delete " + key + ": " + e.getMessage());
      return Status.ERROR;
    }
  }

  /**
   * A record as bytes: for each field in name order, [int32 name length][name, UTF-8]
   * [int32 value length][value], big-endian. Sorted so equal records are equal bytes.
   */
  static byte[] encode(Map<String, ByteIterator> values) {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    ByteBuffer len = ByteBuffer.allocate(4);
    for (Map.Entry<String, ByteIterator> field : new TreeMap<>(values).entrySet()) {
      byte[] name = bytes(field.getKey());
      byte[] value = field.getValue().toArray();
      out.write(len.putInt(0, name.length).array(), 0, 4);
      out.write(name, 0, name.length);
      out.write(len.putInt(0, value.length).array(), 0, 4);
      out.write(value, 0, value.length);
    }
    return out.toByteArray();
  }

  /** The fields of an encoded record (only `fields`, or all when null) into `into`. */
  static void decode(byte[] record, Set<String> fields, Map<String, ByteIterator> into) {
    ByteBuffer buf = ByteBuffer.wrap(record);
    while (buf.hasRemaining()) {
      int nameLength = length(buf);
      String name = new String(record, buf.position(), nameLength, StandardCharsets.UTF_8);
      buf.position(buf.position() + nameLength);
      int valueLength = length(buf);
      if (fields == null || fields.contains(name)) {
        into.put(name, new ByteArrayByteIterator(record, buf.position(), valueLength));
      }
      buf.position(buf.position() + valueLength);
    }
  }

  /** Reads one length prefix; a length past the end means a damaged record, not a short one. */
  private static int length(ByteBuffer buf) {
    if (buf.remaining() < 4) {
      throw new IllegalArgumentException("damaged record: truncated length at byte " + buf.position());
    }
    int n = buf.getInt();
    if (n < 0 || n > buf.remaining()) {
      throw new IllegalArgumentException("damaged record: length " + n + " at byte " + (buf.position() - 4));
    }
    return n;
  }

  private static byte[] bytes(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  private static boolean bool(Properties p, String key, boolean dflt) throws DBException {
    String v = p.getProperty(key);
    if (v == null) {
      return dflt;
    }
    if (!v.equals("true") && !v.equals("false")) {
      throw new DBException("property " + key + " must be true or false, got '" + v + "'");
    }
    return v.equals("true");
  }

  private static long longValue(Properties p, String key, long dflt) throws DBException {
    String v = p.getProperty(key);
    if (v == null) {
      return dflt;
    }
    try {
      long n = Long.parseLong(v);
      if (n < 0) {
        throw new NumberFormatException("negative");
      }
      return n;
    } catch (NumberFormatException e) {
      throw new DBException("property " + key + " must be a byte count, got '" + v + "'");
    }
  }

  private static CompressionType compression(String name) throws DBException {
    switch (name) {
      case "none": return CompressionType.NO_COMPRESSION;
      case "snappy": return CompressionType.SNAPPY_COMPRESSION;
      case "lz4": return CompressionType.LZ4_COMPRESSION;
      case "zstd": return CompressionType.ZSTD_COMPRESSION;
      default: throw new DBException("property " + COMPRESSION + " must be none, snappy, lz4 or zstd, got '"
          + name + "'");
    }
  }
}
