/**
 * The built-in authorization server's state in a cluster's Redis (replica mode, docs/replicas-data.md),
 * so that any replica continues a flow another began: an authorization on A, its token on B, a
 * refresh on C. Keys under `oauth-server:` of the cluster (src/redis/key-names.ts):
 * approvals and registrations in two hashes; codes, consents waiting, refresh tokens and used
 * client assertions one key each, kept by the SHA-256 of the secret and expiring with it (PX);
 * revocations in a sorted set scored by when they lapse.
 *
 * What must happen once happens in Redis: a code is exchanged by `SET NX` of its `:used` key (one
 * replica wins; the others read the family it gave and revoke it), a refresh token is rotated by
 * `SET NX` of its `:used` key, a consent is taken by GETDEL, a family is revoked by one script that
 * also deletes its refresh tokens, and a new refresh token is stored by one script that refuses a
 * family revoked meanwhile.
 *
 * `isRevoked` is synchronous (the protected resource asks on every request): each replica keeps a
 * copy of the revocations, read again every `REVOKED_POLL_MS` (and its own added at once, and kept
 * through a copy read before Redis had them). So an access token revoked on another replica is
 * refused here within that time plus one Redis answer, and one revoked here at once.
 * While Redis is away the copy is kept as it was (the revocations known stay in force).
 *
 * Every command goes through the cluster's client, which bounds each in time and fails at once
 * while Redis is known away (src/redis/connection.ts): the caller answers 503.
 */
import { createHash } from "node:crypto"
import type { ApprovedClient, RefreshRecord, RegisteredClient } from "../../config/oauth-server-file.js"
import { log } from "../../logging/log.js"
import { clusterKey } from "../../redis/key-names.js"
import type { ClusterData } from "../../records/redis-records.js"
import { capped, GRANT_LIMITS, revokedIn, type CodeRecord, type FoundCode, type GrantState, type PendingConsent } from "./grant-state.js"

/** How often a replica reads the cluster's revocations again: the bound on how long another replica's revocation takes to apply here (ms). */
export const REVOKED_POLL_MS = 1000

/** Adds an entry under a capped index (a sorted set by expiry): the expired and, past the cap, the oldest dropped with their keys. */
const PUT_CAPPED = `
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[4])
while redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[5]) do
  local oldest = redis.call('ZPOPMIN', KEYS[1])
  redis.call('DEL', ARGV[6] .. oldest[1])
end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[7])
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
return 1
`

/** A new refresh token, unless its family was revoked: KEYS revoked, refresh index, the token's key, the family's set. */
const PUT_REFRESH = `
local lapses = redis.call('ZSCORE', KEYS[1], ARGV[1])
if lapses and tonumber(lapses) > tonumber(ARGV[5]) then return 0 end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[5])
while redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[6]) do
  local oldest = redis.call('ZPOPMIN', KEYS[2])
  redis.call('DEL', ARGV[7] .. oldest[1], ARGV[7] .. oldest[1] .. ':used')
end
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[8])
redis.call('SET', KEYS[3], ARGV[2], 'PX', ARGV[3])
redis.call('SADD', KEYS[4], ARGV[8])
redis.call('PEXPIRE', KEYS[4], ARGV[3])
return 1
`

/** Revokes a family: KEYS revoked, the family's set, the refresh index. Returns the client it was of. */
const REVOKE_FAMILY = `
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[4])
local over = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[5])
if over > 0 then redis.call('ZPOPMIN', KEYS[1], over) end
local client = false
for _, m in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  local k = ARGV[3] .. m
  if not client then
    local v = redis.call('GET', k)
    if v then client = cjson.decode(v)['client_id'] end
  end
  redis.call('DEL', k, k .. ':used')
  redis.call('ZREM', KEYS[3], m)
end
redis.call('DEL', KEYS[2])
return client
`

/** Revokes an access token: KEYS revoked. */
const REVOKE = `
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[3])
local over = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[4])
if over > 0 then redis.call('ZPOPMIN', KEYS[1], over) end
return 1
`

/** The revocations in force: member, score pairs. */
const REVOKED_NOW = `return redis.call('ZRANGE', KEYS[1], ARGV[1], '+inf', 'BYSCORE', 'WITHSCORES')`

const hashOf = (text: string): string => createHash("sha256").update(text, "utf8").digest("hex")

export class RedisGrantState implements GrantState {
  private readonly k: (...parts: ReadonlyArray<string>) => string
  private revoked = new Map<string, number>()
  /**
   * Revocations made here that no copy read from Redis has shown yet: a read that began before one of
   * them was written would otherwise drop it from `revoked` until the next read.
   */
  private readonly unseen = new Map<string, number>()
  private timer: NodeJS.Timeout | undefined
  private reading: Promise<void> | undefined
  private failing = false

  constructor(
    private readonly data: ClusterData,
    private readonly now: () => number = Date.now
  ) {
    this.k = (...parts) => clusterKey(data.cluster, "oauth-server", ...parts)
  }

  /** Reads the revocations, then every `REVOKED_POLL_MS` (the timer is this object's: `close` ends it). */
  static async open(data: ClusterData, now: () => number = Date.now): Promise<RedisGrantState> {
    const state = new RedisGrantState(data, now)
    await state.readRevoked()
    state.timer = setInterval(() => void state.readRevoked().catch(() => undefined), REVOKED_POLL_MS)
    state.timer.unref()
    return state
  }

  private readRevoked(): Promise<void> {
    this.reading ??= (async () => {
      try {
        const flat = (await this.data.client.eval(REVOKED_NOW, { keys: [this.k("revoked")], arguments: [String(this.now())] })) as string[]
        const next = new Map<string, number>()
        for (let i = 0; i + 1 < flat.length; i += 2) next.set(flat[i]!, Number(flat[i + 1]))
        const now = this.now()
        for (const [key, until] of this.unseen) {
          if (next.has(key) || until <= now) this.unseen.delete(key)
          else next.set(key, until)
        }
        this.revoked = next
        if (this.failing) log.info("the cluster's OAuth revocations are read again", { event: "oauth_server_revocations_read" })
        this.failing = false
      } catch (e) {
        // Kept as it was: the revocations known stay in force.
        if (!this.failing) log.warn(`the cluster's OAuth revocations cannot be read, the last copy kept: ${(e as Error).message}`, { event: "oauth_server_revocations_unread" })
        this.failing = true
        throw e
      } finally {
        this.reading = undefined
      }
    })()
    return this.reading
  }

  async flush(): Promise<void> {}

  async close(): Promise<void> {
    clearInterval(this.timer)
    this.timer = undefined
  }

  private async json<T>(key: string): Promise<T | undefined> {
    const text = await this.data.client.get(key)
    return text === null ? undefined : (JSON.parse(text) as T)
  }

  async approval(clientId: string): Promise<ApprovedClient | undefined> {
    const text = await this.data.client.hGet(this.k("clients"), clientId)
    return text === null || text === undefined ? undefined : (JSON.parse(text) as ApprovedClient)
  }

  async putApproval(clientId: string, entry: ApprovedClient): Promise<boolean> {
    const key = this.k("clients")
    if (!(await this.data.client.hExists(key, clientId)) && (await this.data.client.hLen(key)) >= GRANT_LIMITS.approved) return false
    await this.data.client.hSet(key, clientId, JSON.stringify(entry))
    return true
  }

  async approvals(): Promise<ReadonlyArray<readonly [string, ApprovedClient]>> {
    return Object.entries(await this.data.client.hGetAll(this.k("clients"))).map(([id, text]) => [id, JSON.parse(text) as ApprovedClient] as const)
  }

  async withdraw(clientId: string, until: number): Promise<{ readonly families: number } | undefined> {
    if (!(await this.data.client.hExists(this.k("clients"), clientId))) return undefined
    // The client's refresh tokens, read from the index in slices (at most GRANT_LIMITS.refresh of them).
    const hashes = await this.data.client.zRange(this.k("refresh"), 0, -1)
    const families = new Set<string>()
    for (let i = 0; i < hashes.length; i += 500) {
      const texts = (await this.data.client.mGet(hashes.slice(i, i + 500).map((h) => this.k("refresh", h)))) as Array<string | null>
      for (const text of texts) {
        if (text === null) continue
        const record = JSON.parse(text) as RefreshRecord
        if (record.client_id === clientId) families.add(record.family)
      }
    }
    // The families first, the approval last: a withdrawal that fails half-way can be asked again.
    for (const family of families) await this.revokeFamily(family, until)
    await this.data.client.hDel(this.k("clients"), clientId)
    return { families: families.size }
  }

  async registered(clientId: string): Promise<RegisteredClient | undefined> {
    const text = await this.data.client.hGet(this.k("registered"), clientId)
    return text === null || text === undefined ? undefined : (JSON.parse(text) as RegisteredClient)
  }

  async putRegistration(clientId: string, entry: RegisteredClient): Promise<void> {
    const key = this.k("registered")
    await this.data.client.hSet(key, clientId, JSON.stringify(entry))
    if ((await this.data.client.hLen(key)) <= GRANT_LIMITS.registered) return
    // Registration is open to anyone: past the cap the oldest registrations not approved go.
    const all = Object.entries(await this.data.client.hGetAll(key)).map(([id, text]) => [id, (JSON.parse(text) as RegisteredClient).created] as const)
    all.sort((a, b) => a[1].localeCompare(b[1]))
    let over = all.length - GRANT_LIMITS.registered
    for (const [id] of all) {
      if (over <= 0) break
      if (id === clientId || (await this.data.client.hExists(this.k("clients"), id))) continue
      await this.data.client.hDel(key, id)
      over--
    }
  }

  async refresh(hash: string): Promise<RefreshRecord | undefined> {
    const [text, used] = (await this.data.client.mGet([this.k("refresh", hash), this.k("refresh", hash, "used")])) as [string | null, string | null]
    if (text === null) return undefined
    return { ...(JSON.parse(text) as RefreshRecord), used: used !== null }
  }

  async rotateRefresh(hash: string): Promise<boolean> {
    const record = await this.json<RefreshRecord>(this.k("refresh", hash))
    if (record === undefined) return false
    const ttl = Math.max(1, record.expires - this.now())
    return (await this.data.client.set(this.k("refresh", hash, "used"), "1", { condition: "NX", expiration: { type: "PX", value: ttl } })) !== null
  }

  async putRefresh(hash: string, record: RefreshRecord): Promise<void> {
    const now = this.now()
    const stored = await this.data.client.eval(PUT_REFRESH, {
      keys: [this.k("revoked"), this.k("refresh"), this.k("refresh", hash), this.k("family", record.family)],
      arguments: [`fam:${record.family}`, JSON.stringify({ ...record, used: false }), String(Math.max(1, record.expires - now)), String(record.expires), String(now), String(GRANT_LIMITS.refresh), `${this.k("refresh")}:`, hash]
    })
    if (Number(stored) === 0) log.info("a refresh token of a family revoked meanwhile was not stored", { event: "oauth_refresh_refused" })
  }

  async revokeFamily(family: string, until: number): Promise<string | undefined> {
    this.revoked.set(`fam:${family}`, until)
    this.unseen.set(`fam:${family}`, until)
    capped(this.unseen, GRANT_LIMITS.revoked)
    const client = await this.data.client.eval(REVOKE_FAMILY, {
      keys: [this.k("revoked"), this.k("family", family), this.k("refresh")],
      arguments: [`fam:${family}`, String(until), `${this.k("refresh")}:`, String(this.now()), String(GRANT_LIMITS.revoked)]
    })
    return typeof client === "string" ? client : undefined
  }

  async putCode(hash: string, record: CodeRecord): Promise<void> {
    const now = this.now()
    await this.data.client.eval(PUT_CAPPED, {
      keys: [this.k("codes"), this.k("code", hash)],
      arguments: [JSON.stringify(record), String(Math.max(1, record.expires - now)), String(record.expires), String(now), String(GRANT_LIMITS.codes), `${this.k("code")}:`, hash]
    })
  }

  async code(hash: string): Promise<FoundCode | undefined> {
    const [text, family] = (await this.data.client.mGet([this.k("code", hash), this.k("code", hash, "used")])) as [string | null, string | null]
    if (text === null) return undefined
    return { record: JSON.parse(text) as CodeRecord, used: family !== null, family: family ?? undefined }
  }

  async claimCode(hash: string, family: string): Promise<{ readonly first: true } | { readonly first: false; readonly family: string | undefined }> {
    const used = this.k("code", hash, "used")
    const first = await this.data.client.set(used, family, { condition: "NX", expiration: { type: "PX", value: GRANT_LIMITS.usedCodeMs } })
    if (first !== null) {
      // The code is remembered as long as its use is, to see a second use.
      await this.data.client.pExpire(this.k("code", hash), GRANT_LIMITS.usedCodeMs)
      return { first: true }
    }
    return { first: false, family: (await this.data.client.get(used)) ?? undefined }
  }

  async dropCode(hash: string): Promise<void> {
    await this.data.client.del([this.k("code", hash), this.k("code", hash, "used")])
  }

  async putConsent(id: string, pending: PendingConsent): Promise<void> {
    const now = this.now()
    await this.data.client.eval(PUT_CAPPED, {
      keys: [this.k("consents"), this.k("consent", id)],
      arguments: [JSON.stringify(pending), String(Math.max(1, pending.expires - now)), String(pending.expires), String(now), String(GRANT_LIMITS.consents), `${this.k("consent")}:`, id]
    })
  }

  async takeConsent(id: string): Promise<PendingConsent | undefined> {
    const text = await this.data.client.getDel(this.k("consent", id))
    if (text === null) return undefined
    await this.data.client.zRem(this.k("consents"), id)
    const pending = JSON.parse(text) as PendingConsent
    return pending.expires > this.now() ? pending : undefined
  }

  async revokeToken(jti: string, until: number): Promise<void> {
    this.revoked.set(`jti:${jti}`, until)
    this.unseen.set(`jti:${jti}`, until)
    capped(this.unseen, GRANT_LIMITS.revoked)
    await this.data.client.eval(REVOKE, { keys: [this.k("revoked")], arguments: [`jti:${jti}`, String(until), String(this.now()), String(GRANT_LIMITS.revoked)] })
  }

  isRevoked(jti: string, family: string): boolean {
    return revokedIn(this.revoked, jti, family, this.now())
  }

  async useAssertion(id: string, until: number): Promise<boolean> {
    const ttl = Math.max(1, Math.ceil(until - this.now()))
    return (await this.data.client.set(this.k("assertion", hashOf(id)), "1", { condition: "NX", expiration: { type: "PX", value: ttl } })) !== null
  }
}
