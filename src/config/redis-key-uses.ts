/**
 * When the keys of a cluster were last used (docs/replicas-data.md). The keys file itself stays a
 * file each replica reads and watches (operators deploy the same file to every replica, as they do
 * the TLS certificates; `mcp-store keys` edits it where it is kept): sharing it through Redis would
 * make Redis a second source of truth for who may enter. Only `last_used` changes at run time, and
 * replicas rewriting one file would lose each other's updates, so in a cluster it goes to a hash,
 * `keys:last_used` (key id -> ISO time, the later time kept), written at most once a minute per
 * replica (KeyRing's own batching). It holds only ids of keys in the file: bounded by the file.
 */
import { clusterKey } from "../redis/key-names.js"
import type { ClusterData } from "../records/redis-records.js"

/** Sets each field to its time unless a later one is there (ISO times compare as text). */
const LATER = `for i = 1, #ARGV, 2 do
  local old = redis.call("HGET", KEYS[1], ARGV[i])
  if not old or old < ARGV[i + 1] then redis.call("HSET", KEYS[1], ARGV[i], ARGV[i + 1]) end
end
return 0`

export class RedisKeyUses {
  private readonly hash: string

  constructor(private readonly data: ClusterData) {
    this.hash = clusterKey(data.cluster, "keys", "last_used")
  }

  /** Keeps these uses (KeyRing.writeUsesTo takes it). */
  readonly write = async (used: ReadonlyMap<string, string>): Promise<void> => {
    if (used.size === 0) return
    await this.data.client.eval(LATER, { keys: [this.hash], arguments: [...used].flat() })
  }

  /** Every key's last use across the replicas (id -> ISO time). */
  async all(): Promise<Readonly<Record<string, string>>> {
    return this.data.client.hGetAll(this.hash)
  }
}
