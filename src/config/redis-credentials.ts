/**
 * The per-user credentials of `per_user` services shared by the replicas of a cluster (README,
 * Per-user credentials; docs/per-user-credentials.md, "Replica mode"): one Redis hash per service,
 * `credentials:<scope label>/<service name>`, one field per principal (its owner digest), each value
 * sealed with AES-256-GCM under an HKDF sub-key (`user-credentials`) of MCPSTORE_SECRET_KEY, the
 * secret every replica has (the OAuth tokens' too, src/config/redis-token-vault.ts, which checks at
 * start that it is the cluster's): not the replicas' internal secret, which may be kept in Redis
 * itself, and whose rotation must not make every credential unreadable. The same
 * caps as the file: `MAX_PRINCIPALS_PER_SERVICE` per service (checked in Redis, in the script that
 * writes), `MAX_CREDENTIAL_BYTES` per credential (checked by the route).
 *
 * Nothing is cached: every call's credential is read from Redis (a versioned read: the pool keeps
 * each connection with the values it was opened with, and opens a new one when they differ), so a
 * credential put or deleted on any replica is used by the very next call on every replica. A change
 * is also published on `credentials:changed`, so every replica closes that principal's pooled
 * connections at once, idle ones included (a missed message only leaves an idle connection open
 * until its next use or its idle timer). A change has `CHANGE_BUDGET_MS`: answered, or refused
 * `ClusterUnavailable` (503), and a change refused is never applied later (its script checks a
 * deadline in Redis's clock, as the definitions' commits do). Nothing here is ever logged but names.
 */
import { ClusterUnavailable } from "../domain/errors.js"
import { log } from "../logging/log.js"
import { COMMAND_TIMEOUT_MS, RedisAway, timed, type ClusterConnection } from "../redis/connection.js"
import { clusterKey } from "../redis/key-names.js"
import { credentialsKey, MAX_PRINCIPALS_PER_SERVICE, type CredentialStore, type UserCredential } from "./credentials-file.js"
import { CHANGE_BUDGET_MS, PAST_DEADLINE } from "./redis-definitions.js"
import { seal, unseal } from "./token-vault.js"

/** MCPSTORE_SECRET_KEY is missing (the replica does not start). */
export class CredentialsKeyError extends Error {
  override readonly name = "CredentialsKeyError"
}

/** Runs only before its deadline (ARGV[1]): -3 past it. */
const BEFORE_DEADLINE = `${PAST_DEADLINE}
if past_deadline then return -3 end
`

/**
 * KEYS: the service's hash. ARGV: deadline, principal, sealed value, most principals, channel,
 * message. 1 written, 0 refused (the service has the most principals), -3 past its deadline.
 */
const PUT = `${BEFORE_DEADLINE}
if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 0 and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[4]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
redis.call('PUBLISH', ARGV[5], ARGV[6])
return 1
`

/** KEYS: the service's hash. ARGV: deadline, principal, channel, message. 1 removed, 0 none, -3 past its deadline. */
const REMOVE = `${BEFORE_DEADLINE}
local removed = redis.call('HDEL', KEYS[1], ARGV[2])
redis.call('PUBLISH', ARGV[3], ARGV[4])
return removed
`

/** What a change message names: a service, and a principal (absent: every one of the service). */
interface ChangeMessage {
  readonly s: string
  readonly p?: string
}

/** The longest change message read (a service key and a digest are far shorter). */
const MAX_MESSAGE_CHARS = 4096

export class RedisCredentials implements CredentialStore {
  private readonly channel: string
  private readonly listeners = new Set<(service: string, principal: string | undefined) => void>()
  private readonly heard = (message: string) => this.tell(message)

  private constructor(
    private readonly connection: ClusterConnection,
    private readonly cluster: string,
    private readonly key: Buffer
  ) {
    this.channel = clusterKey(cluster, "credentials", "changed")
  }

  /** Follows the cluster's changes of credentials on the replica's subscriber connection; `secret` defaults to MCPSTORE_SECRET_KEY. */
  static async open(connection: ClusterConnection, cluster: string, secret: string | undefined = process.env["MCPSTORE_SECRET_KEY"]): Promise<RedisCredentials> {
    if (secret === undefined || secret === "") {
      throw new CredentialsKeyError("replicas share the per-user credentials, encrypted: set MCPSTORE_SECRET_KEY to the same secret on every replica")
    }
    const store = new RedisCredentials(connection, cluster, credentialsKey(secret))
    await timed(connection.subscriber.subscribe(store.channel, store.heard), COMMAND_TIMEOUT_MS, "following the per-user credentials' changes")
    return store
  }

  private hash(service: string): string {
    return clusterKey(this.cluster, "credentials", service)
  }

  async find(service: string, principal: string): Promise<UserCredential | undefined> {
    const sealed = await this.connection.run("reading a per-user credential", () => this.connection.client.hGet(this.hash(service), principal))
    if (sealed === null || sealed === undefined) return undefined
    try {
      return JSON.parse(unseal(this.key, sealed)) as UserCredential
    } catch {
      log.warn(`a per-user credential of service ${service} in Redis cannot be read (another cluster secret?): its principal must give it again`, {
        event: "credentials_unreadable",
        service
      })
      return undefined
    }
  }

  async put(service: string, principal: string, credential: UserCredential): Promise<boolean> {
    const message = JSON.stringify({ s: service, p: principal } satisfies ChangeMessage)
    const written = await this.change("keeping a per-user credential", (deadline) => [
      PUT,
      [this.hash(service)],
      [deadline, principal, seal(this.key, JSON.stringify(credential)), String(MAX_PRINCIPALS_PER_SERVICE), this.channel, message]
    ])
    return written === 1
  }

  async remove(service: string, principal: string): Promise<boolean> {
    const message = JSON.stringify({ s: service, p: principal } satisfies ChangeMessage)
    const removed = await this.change("deleting a per-user credential", (deadline) => [REMOVE, [this.hash(service)], [deadline, principal, this.channel, message]])
    return removed === 1
  }

  /** A service was deleted: its hash goes, and every replica closes its connections (best effort: the service is gone anyway). */
  async forget(service: string): Promise<void> {
    const message = JSON.stringify({ s: service } satisfies ChangeMessage)
    await this.connection.run("forgetting a service's per-user credentials", () => this.connection.client.multi().del(this.hash(service)).publish(this.channel, message).exec())
  }

  onChange(listener: (service: string, principal: string | undefined) => void): () => void {
    this.listeners.add(listener)
    return () => void this.listeners.delete(listener)
  }

  /** Stops following the changes (the subscriber connection is the cluster's: it stays open). */
  async close(): Promise<void> {
    this.listeners.clear()
    await timed(this.connection.subscriber.unsubscribe(this.channel, this.heard), 1000).catch(() => undefined)
  }

  private tell(text: string): void {
    if (text.length > MAX_MESSAGE_CHARS) return
    let message: ChangeMessage
    try {
      message = JSON.parse(text) as ChangeMessage
    } catch {
      return
    }
    if (typeof message?.s !== "string" || (message.p !== undefined && typeof message.p !== "string")) return
    for (const listener of [...this.listeners]) listener(message.s, message.p)
  }

  /**
   * Runs a change's script within `CHANGE_BUDGET_MS`: its answer, or `ClusterUnavailable`. A script
   * that may have been sent but was not answered is refused only once its deadline has passed here:
   * Redis refuses to run it from then on, so it never lands after its refusal.
   */
  private async change(what: string, script: (deadline: string) => [string, string[], string[]]): Promise<number> {
    const deadline = Date.now() + CHANGE_BUDGET_MS
    const [text, keys, args] = script(String(this.connection.redisDeadline(deadline)))
    let reply: number
    try {
      reply = (await timed(this.connection.client.eval(text, { keys, arguments: args }), deadline - Date.now(), what)) as number
    } catch (e) {
      const unsent = e instanceof RedisAway || (e instanceof Error && e.message === "The client is offline")
      const wait = deadline - Date.now()
      if (!unsent && wait > 0) await new Promise((resolve) => setTimeout(resolve, wait))
      throw ClusterUnavailable.of(what, e)
    }
    if (reply === -3) throw ClusterUnavailable.of(what, new Error(`Redis did not run it within ${CHANGE_BUDGET_MS} ms`))
    return reply
  }
}
