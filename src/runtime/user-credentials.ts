/**
 * Per-user credentials of `per_user` services (README, Per-user credentials): each principal's own
 * header or environment values (kept encrypted by a `CredentialStore`), and the connections opened
 * with them. A call of a principal on such a service goes through its own connection, never the
 * service's shared one (kept for listing tools and health): at most `maxConnections` per service
 * (`--per-user-connections`), the least recently used idle one closed first, an idle one closed
 * after `idleMs` (`--per-user-idle-seconds`). Each pooled connection is owned here: its timer
 * cleared and the connection closed when the principal's credential changes (here, or on another
 * replica: the store's `onChange`), the service is deleted or redefined, or the store stops; one
 * that closes by itself (a process that exited) leaves the pool at once. A
 * connection is kept with the values it was opened with: a call with other values (a credential
 * changed elsewhere, read before the change was heard of) opens a new one.
 * A service with `per_user.oauth` carries each principal's own bearer token on its connection (kept
 * by the store's OAuth manager, src/runtime/upstream-oauth.ts, seen here as `PrincipalAuthorizations`).
 * A resource subscription holds its principal's connection (`ConnectionHold`): not closed for
 * idleness while held, never closed to make room for another principal (it is in use: its
 * principal's updates come on it; at the bound with every connection busy or held, the newcomer is
 * refused TooMany), and its holds told whenever it closes, so that they subscribe again on the
 * next one or are dropped. Holds take at most `maxConnections - 1` connections (a subscribe that
 * would hold one more is refused TooMany; with a bound of 1, none): one is always left for plain
 * requests, so other principals' subscriptions alone never lock a caller out.
 */
import { createHash } from "node:crypto"
import { Exit } from "effect"
import type { CredentialStore, UserCredential } from "../config/credentials-file.js"
import { TooMany } from "../domain/errors.js"
import { scopeLabel, type Scope, type ServiceDefinition } from "../domain/service-definition.js"
import { log } from "../logging/log.js"
import { McpRequestError, type McpConnection } from "../mcp/types.js"
import { unlessCancelled, type CancelSignal } from "../domain/cancellation.js"

/** The names a `per_user` definition asks each principal for, and whether each authorizes the upstream's OAuth itself. */
export interface PerUserNames {
  readonly headers: ReadonlyArray<string>
  readonly env: ReadonlyArray<string>
  readonly oauth: boolean
}

/** The `per_user` names of a definition; undefined for a service every caller shares. */
export const perUserOf = (definition: ServiceDefinition): PerUserNames | undefined => {
  const p = definition.per_user
  return p === undefined ? undefined : { headers: p.headers ?? [], env: p.env ?? [], oauth: p.oauth === true }
}

/** The principals' own upstream OAuth tokens, as this module needs them (the store's `OAuthManager`). */
export interface PrincipalAuthorizations {
  /** Whether the principal holds its own token of the service. */
  hasToken(scope: Scope, name: string, principal: string): boolean
  /** Reads the principal's own entry where it is shared (replica mode), so `hasToken` tells what any replica did; rejects `ClusterUnavailable`. */
  readPrincipal(scope: Scope, name: string, principal: string): Promise<void>
  /** Forgets the principal's own tokens of the service; false when it had none. */
  forgetPrincipal(scope: Scope, name: string, principal: string): Promise<boolean>
}

/** A service a pooled connection is opened for. */
export interface PerUserTarget {
  readonly scope: Scope
  readonly name: string
  readonly definition: ServiceDefinition
}

/** Opens a connection of a service with a principal's values (src/runtime/adapter.ts `openPrincipalConnection`). */
export type PrincipalOpener = (target: PerUserTarget, values: UserCredential, timeoutMs: number, signal: AbortSignal, principal: string) => Promise<McpConnection>

/** How many principals' connections a service keeps at most, and how long an idle one stays open. */
export const DEFAULT_PER_USER_CONNECTIONS = 16
export const DEFAULT_PER_USER_IDLE_MS = 5 * 60_000

/**
 * A long use of a principal's connection beyond one request (a resource subscription, which hears
 * the upstream's updates on it): given to `request`, it holds the connection the request ran on
 * once the request succeeded, until `release()`. `onClosed` hears the connection close under it
 * (`why`, for a log line; `again`: whether subscribing again on a new connection makes sense, false
 * when the store stops). Told once. `onUnwanted` hears of a request that succeeded after the hold
 * was released (its subscriber gone meanwhile): what it did on that connection is nobody's, to undo.
 */
export class ConnectionHold {
  private releaseHere: (() => void) | undefined
  private released = false

  constructor(
    readonly onClosed: (why: string, again: boolean) => void,
    private readonly unwantedHere: (connection: McpConnection) => void = () => undefined
  ) {}

  /** Its request succeeded when it was no longer wanted: `connection` is handed back once (the catalog's cancel and the pool may both find it). */
  onUnwanted(connection: McpConnection): void {
    if (this.unwanted) return
    this.unwanted = true
    this.unwantedHere(connection)
  }
  private unwanted = false

  /** The hold ends (the subscription is gone): the connection may be closed for idleness again. */
  release(): void {
    this.released = true
    const release = this.releaseHere
    this.releaseHere = undefined
    release?.()
  }

  /** The pool holds the connection for it; false when it was released before its request ended. */
  attach(release: () => void): boolean {
    if (this.released) return false
    this.releaseHere = release
    return true
  }

  /** The connection closed: the hold is over, `onClosed` told. */
  closed(why: string, again: boolean): void {
    if (this.released) return
    this.released = true
    this.releaseHere = undefined
    this.onClosed(why, again)
  }
}

interface Pooled {
  readonly definition: ServiceDefinition
  /** A digest of the values it was opened with (no second copy of a secret kept). */
  readonly values: string
  readonly opening: Promise<McpConnection>
  readonly abort: AbortController
  inUse: number
  /** The holds on it (resource subscriptions): while any, it is not closed for idleness. */
  readonly holds: Set<ConnectionHold>
  /** Its requests in flight that will hold it once they succeed (subscribes): counted as held meanwhile. */
  holding: number
  timer: NodeJS.Timeout | undefined
}

/** What a connection was opened with, to tell whether a credential changed since (values are never kept in clear). */
const digestOf = (values: UserCredential): string => createHash("sha256").update(JSON.stringify(values)).digest("base64url")

const key = (scope: Scope, name: string): string => `${scopeLabel(scope)}/${name}`

/** Whether a connection is held by a subscription, or will be once a subscribe in flight on it succeeds. */
const isHeld = (p: Pooled): boolean => p.holds.size > 0 || p.holding > 0

/** A warn line per service at most once a minute: the first refusal at once, the later ones counted into the next. */
const FULL_LINE_MS = 60_000

/** The pool's bounds. */
export interface PerUserLimits {
  readonly maxConnections: number
  readonly idleMs: number
}

export class UserCredentials {
  private readonly pools = new Map<string, Map<string, Pooled>>()
  /** Connections out of the pool whose calls under way end before they close (`drop`'s `afterCalls`). */
  private readonly retiring = new Map<Pooled, { readonly service: string; readonly principal: string; readonly why: string }>()
  /** Per service: when its last `per_user_connections_full` line was written, and the refusals since. */
  private readonly fullLines = new Map<string, { at: number; since: number }>()
  private closed = false
  private unlisten: (() => void) | undefined

  constructor(
    private readonly store: Promise<CredentialStore>,
    private readonly open: PrincipalOpener,
    private readonly closeConnection: (connection: McpConnection) => Promise<void>,
    private readonly limits: PerUserLimits = { maxConnections: DEFAULT_PER_USER_CONNECTIONS, idleMs: DEFAULT_PER_USER_IDLE_MS },
    /** The principals' own OAuth tokens (`per_user.oauth`); absent: such a service has none to give. */
    readonly authorizations?: PrincipalAuthorizations | undefined
  ) {
    // Another replica changed a credential: this replica's connections of that principal close too.
    void store.then((s) => {
      if (this.closed) return
      this.unlisten = s.onChange?.((service, principal) => {
        const principals = principal === undefined ? [...(this.pools.get(service)?.keys() ?? [])] : [principal]
        for (const p of principals) void this.dropStale(service, p, () => s.find(service, p), "its credential changed on another replica")
      })
    }, () => undefined)
  }

  /** Whether the principal holds its own OAuth token of the service (`per_user.oauth`). */
  authorized(scope: Scope, name: string, principal: string): boolean {
    return this.authorizations?.hasToken(scope, name, principal) === true
  }

  /** Whether it does as the shared token store says now (replica mode: read from Redis; rejects when it does not answer). */
  async authorizedNow(scope: Scope, name: string, principal: string): Promise<boolean> {
    await this.authorizations?.readPrincipal(scope, name, principal)
    return this.authorized(scope, name, principal)
  }

  /** A principal's connection of the service is closed (its authorization changed: the next call opens a new one). */
  reset(scope: Scope, name: string, principal: string, why: string): Promise<void> {
    return this.drop(key(scope, name), principal, why)
  }

  /** The principal's credential for a service, if it gave one. */
  async find(scope: Scope, name: string, principal: string): Promise<UserCredential | undefined> {
    return (await this.store).find(key(scope, name), principal)
  }

  /** Keeps a principal's credential (its open connection, if any, is closed: the next call uses the new values). */
  async set(scope: Scope, name: string, principal: string, credential: UserCredential): Promise<boolean> {
    const kept = await (await this.store).put(key(scope, name), principal, credential)
    if (kept) await this.dropStale(key(scope, name), principal, async () => credential, "its credential changed")
    return kept
  }

  /**
   * Forgets a principal's own OAuth tokens, then its credential, and closes its connection; false
   * when it had neither. In that order so that a removal that fails half-way (replica mode: Redis
   * lost between the two) can simply be asked again: what is left is the credential, which the
   * retry finds and removes, answering as the first would have. (The other way round, a retry found
   * no credential and answered that there was none.) The connection is closed either way.
   */
  async remove(scope: Scope, name: string, principal: string): Promise<boolean> {
    try {
      const forgotten = (await this.authorizations?.forgetPrincipal(scope, name, principal)) === true
      const removed = await (await this.store).remove(key(scope, name), principal)
      return removed || forgotten
    } finally {
      void this.drop(key(scope, name), principal, "its credential was deleted")
    }
  }

  /**
   * A service was deleted: every credential of it forgotten, every connection of it closed. Never
   * rejects: credentials that could not be forgotten are a log line (replica mode: Redis lost just
   * after the deletion was written there; every replica that applies the deletion forgets them too).
   */
  async forget(scope: Scope, name: string): Promise<void> {
    const service = key(scope, name)
    for (const principal of [...(this.pools.get(service)?.keys() ?? [])]) void this.drop(service, principal, "its service was deleted")
    this.fullLines.delete(service)
    try {
      await (await this.store).forget(service)
    } catch (e) {
      log.warn(`the per-user credentials of deleted service '${name}' could not be forgotten: ${e instanceof Error ? e.message : String(e)}`, { event: "credentials_forget_failed", service: name })
    }
  }

  /**
   * Runs `request` on the principal's own connection of the service (opened with `values` if it has
   * none, or if the service was redefined since): an expired session is opened again and the request
   * sent once more; a broken connection is closed. Refused TooMany (with a log line, at most one a
   * minute per service) when the service has `maxConnections` principals' connections, each in use
   * by a request or held by a subscription. `hold`: once the request succeeded, the connection it
   * ran on is held for it (see `ConnectionHold`); refused TooMany at once when that would make
   * `maxConnections` held connections (one is kept for plain requests). `signal`: the caller went
   * away; a connection still opening is no longer waited for (nor counted as held for it).
   */
  async request<A>(
    target: PerUserTarget,
    principal: string,
    values: UserCredential,
    options: { readonly remaining: () => number; readonly hold?: ConnectionHold | undefined; readonly signal?: CancelSignal | undefined },
    request: (connection: McpConnection) => Promise<A>
  ): Promise<Exit.Exit<A, McpRequestError | TooMany>> {
    const service = key(target.scope, target.name)
    // The store stops: no connection is opened any more (nothing would own it).
    if (this.closed) return Exit.fail(new McpRequestError("aborted", "the store is stopping"))
    for (let retried = false; ; retried = true) {
      const pooled = this.acquire(service, target, principal, values, options)
      if (pooled instanceof TooMany) return Exit.fail(pooled)
      try {
        const connection = await openedUnlessCancelled(pooled.opening, options.signal)
        const answer = await request(connection)
        if (options.hold !== undefined) this.hold(service, principal, pooled, options.hold, connection)
        return Exit.succeed(answer)
      } catch (e) {
        if (!(e instanceof McpRequestError)) return Exit.die(e)
        // Closed under the call (its credential changed or was deleted, the service went, the store stops):
        // a failure of the call, not the caller's own cancellation.
        if (e.kind === "aborted" && this.pools.get(service)?.get(principal) !== pooled) {
          return Exit.fail(new McpRequestError("transport", "the principal's connection was closed during the call (its credential changed or was deleted)"))
        }
        const broken = e.kind === "session_expired" || e.kind === "transport"
        // Only if it is still the pooled one: a connection already out of the pool (`retiring`) is not a newer one's.
        if (broken && this.pools.get(service)?.get(principal) === pooled) void this.drop(service, principal, `its connection failed: ${e.kind}`)
        if (e.kind === "session_expired" && !retried) continue
        return Exit.fail(e)
      } finally {
        if (options.hold !== undefined) pooled.holding -= 1
        this.release(service, principal, pooled)
      }
    }
  }

  /** Closes every pooled connection (the store stops). */
  async closeAll(): Promise<void> {
    this.closed = true
    this.unlisten?.()
    this.unlisten = undefined
    const all = [...this.pools].flatMap(([service, pool]) => [...pool.keys()].map((principal) => ({ service, principal })))
    const retired = [...this.retiring].map(([pooled, r]) => this.close(r.service, r.principal, pooled, "the store stops"))
    this.retiring.clear()
    await Promise.all([...all.map(({ service, principal }) => this.drop(service, principal, "the store stops")), ...retired])
  }

  /** Holds `pooled` (open as `connection`) for `hold`, if it is still the principal's connection (else the hold hears it closed), and the hold not released. */
  private hold(service: string, principal: string, pooled: Pooled, hold: ConnectionHold, connection: McpConnection): void {
    if (this.pools.get(service)?.get(principal) !== pooled) return hold.closed("its connection was closed during the subscription", true)
    if (!hold.attach(() => this.unhold(service, principal, pooled, hold))) return hold.onUnwanted(connection)
    pooled.holds.add(hold)
  }

  private unhold(service: string, principal: string, pooled: Pooled, hold: ConnectionHold): void {
    if (!pooled.holds.delete(hold)) return
    // The last hold gone with no request in flight: idle from now on.
    if (pooled.inUse === 0 && pooled.holds.size === 0) this.armIdle(service, principal, pooled)
  }

  /** How many principals' connections are open or opening (figures, tests). */
  get size(): number {
    let n = 0
    for (const pool of this.pools.values()) n += pool.size
    return n
  }

  private acquire(
    service: string,
    target: PerUserTarget,
    principal: string,
    values: UserCredential,
    options: { readonly remaining: () => number; readonly hold?: ConnectionHold | undefined }
  ): Pooled | TooMany {
    let pool = this.pools.get(service)
    if (pool === undefined) this.pools.set(service, (pool = new Map()))
    const known = pool.get(principal)
    const given = digestOf(values)
    const reusable = known !== undefined && known.definition === target.definition && known.values === given
    // A subscribe that would hold one more connection: at most max - 1 are held, one is kept for plain requests.
    if (options.hold !== undefined && !(reusable && isHeld(known))) {
      const held = [...pool].filter(([p, c]) => p !== principal && isHeld(c)).length
      if (held + 1 >= this.limits.maxConnections) return this.refuse(service, target.name, principal, pool, "subscription")
    }
    if (reusable) {
      pool.delete(principal)
      pool.set(principal, known) // most recently used last
      clearTimeout(known.timer)
      known.timer = undefined
      known.inUse += 1
      if (options.hold !== undefined) known.holding += 1
      return known
    }
    if (known !== undefined) void this.drop(service, principal, known.definition === target.definition ? "its credential changed" : "its service was redefined")
    if (pool.size >= this.limits.maxConnections) {
      // The least recently used idle one. One held by a subscription is in use: closing it would end
      // another principal's subscriptions without its client hearing of it.
      const idle = [...pool].find(([, p]) => p.inUse === 0 && !isHeld(p))
      if (idle === undefined) return this.refuse(service, target.name, principal, pool, "connection")
      void this.drop(service, idle[0], "more principals use the service (least recently used)")
    }
    // A drop above may have emptied the pool and so forgotten it: it is the service's pool again.
    this.pools.set(service, pool)
    const abort = new AbortController()
    const opening = this.open(target, values, Math.max(1, options.remaining()), abort.signal, principal)
    const pooled: Pooled = { definition: target.definition, values: given, opening, abort, inUse: 1, holds: new Set(), holding: options.hold === undefined ? 0 : 1, timer: undefined }
    pool.set(principal, pooled)
    opening.then(
      (connection) => {
        log.info(`opened a per-user connection of service '${target.name}' for principal ${principalWords(principal)}`, { event: "per_user_connection_opened", service: target.name })
        // Closed by itself (its process exited, its stream ended): out of the pool at once, its holds told.
        connection.onClose((reason) => {
          if (this.pools.get(service)?.get(principal) === pooled) void this.drop(service, principal, `it closed by itself (${reason})`)
        })
      },
      () => {
        if (pool.get(principal) === pooled) pool.delete(principal)
      }
    )
    return pooled
  }

  /**
   * The refusal of a request that finds no room (`what`: a new connection, or a subscription that
   * would hold one more than max - 1), with a warn line: the first at once, then at most one a
   * minute per service, counting the refusals since the last.
   */
  private refuse(service: string, name: string, principal: string, pool: Map<string, Pooled>, what: "connection" | "subscription"): TooMany {
    const max = this.limits.maxConnections
    const held = [...pool.values()].filter(isHeld).length
    const now = performance.now()
    const last = this.fullLines.get(service)
    if (last !== undefined && now - last.at < FULL_LINE_MS) last.since += 1
    else {
      const since = last === undefined || last.since === 0 ? "" : ` (${last.since} more refused since the last such line)`
      const why =
        what === "connection"
          ? `its ${max} principals' connections are all in use (${held} held by resource subscriptions)`
          : max === 1
            ? "resource subscriptions need --per-user-connections of at least 2 (one connection is kept for plain requests)"
            : `${held} of its ${max} principals' connections are held by resource subscriptions, the most (one is kept for plain requests)`
      log.warn(`a per-user ${what} of service '${name}' for principal ${principalWords(principal)} refused: ${why}${since}`, { event: "per_user_connections_full", service: name })
      this.fullLines.set(service, { at: now, since: 0 })
    }
    return what === "connection" ? perUserTooMany(name, max) : perUserHoldsFull(name, max)
  }

  private release(service: string, principal: string, pooled: Pooled): void {
    pooled.inUse -= 1
    // Out of the pool with calls under way (`drop`'s `afterCalls`): closed once the last ends.
    const retired = this.retiring.get(pooled)
    if (retired !== undefined) {
      if (pooled.inUse > 0) return
      this.retiring.delete(pooled)
      void this.close(retired.service, retired.principal, pooled, retired.why)
      return
    }
    // Held by a subscription: not idle while it lasts.
    if (pooled.inUse > 0 || pooled.holds.size > 0) return
    this.armIdle(service, principal, pooled)
  }

  private armIdle(service: string, principal: string, pooled: Pooled): void {
    if (this.pools.get(service)?.get(principal) !== pooled || this.closed) return
    clearTimeout(pooled.timer)
    pooled.timer = setTimeout(() => void this.drop(service, principal, "it was idle"), this.limits.idleMs)
    pooled.timer.unref()
  }

  /**
   * Closes the principal's connection of the service unless it was opened with the credential held
   * now (`current`): a change heard after a call read the new credential and opened its connection
   * with it must not close that connection under the call. Unreadable (Redis away, or too slow to
   * answer): whether it is stale cannot be told, so it leaves the pool (the next call opens one with
   * the credential it reads), but the calls under way on it end first (`drop`'s `afterCalls`).
   */
  private async dropStale(service: string, principal: string, current: () => Promise<UserCredential | undefined>, why: string): Promise<void> {
    if (this.pools.get(service)?.get(principal) === undefined) return
    const now = await current().then((c) => (c === undefined ? undefined : digestOf(c)), () => null)
    const pooled = this.pools.get(service)?.get(principal)
    if (pooled === undefined || pooled.values === now) return
    // Out of the pool now; its close goes on in the background.
    void this.drop(service, principal, now === null ? `${why} (its credential could not be read)` : why, now === null)
  }

  /**
   * Takes a principal's connection out of the pool and closes it; its holds are told, to subscribe
   * again on a new one unless the store stops. `afterCalls`: a connection with calls under way is
   * closed when the last of them ends (`release`), not under them.
   */
  private drop(service: string, principal: string, why: string, afterCalls = false): Promise<void> {
    const again = !this.closed
    const pool = this.pools.get(service)
    const pooled = pool?.get(principal)
    if (pool === undefined || pooled === undefined) return Promise.resolve()
    pool.delete(principal)
    if (pool.size === 0) this.pools.delete(service)
    clearTimeout(pooled.timer)
    const holds = [...pooled.holds]
    pooled.holds.clear()
    for (const hold of holds) hold.closed(why, again)
    if (afterCalls && pooled.inUse > 0) {
      this.retiring.set(pooled, { service, principal, why })
      return Promise.resolve()
    }
    return this.close(service, principal, pooled, why)
  }

  /** Closes a connection out of the pool (its opening aborted if it is still opening). */
  private close(service: string, principal: string, pooled: Pooled, why: string): Promise<void> {
    pooled.abort.abort()
    return pooled.opening.then(
      (connection) => {
        log.info(`closed the per-user connection of service '${service}' for principal ${principalWords(principal)}: ${why}`, { event: "per_user_connection_closed", service })
        return this.closeConnection(connection)
      },
      () => undefined
    )
  }
}

/** A connection being opened, or the request's own cancellation first (aborted: the connection goes on opening for the pool). */
const openedUnlessCancelled = (opening: Promise<McpConnection>, signal: CancelSignal | undefined): Promise<McpConnection> =>
  signal === undefined ? opening : unlessCancelled(opening, signal, () => Promise.reject(new McpRequestError("aborted", "the request was cancelled")))

/** The refusal of a request on a `per_user` service whose `max` principals' connections are all in use (HTTP 429, Retry-After). */
export const perUserTooMany = (name: string, max: number): TooMany =>
  new TooMany({
    message: `Service '${name}' already has ${max} principals' connections in use; try again shortly`,
    limit: "per_user_connections",
    max,
    retryAfterSeconds: 1
  })

/**
 * The refusal of a resource subscription on a `per_user` service whose `max - 1` connections held
 * by subscriptions are the most (HTTP 429); with a bound of 1 none is ever held, so trying again
 * cannot help: no time to wait is named.
 */
export const perUserHoldsFull = (name: string, max: number): TooMany =>
  new TooMany({
    message:
      max === 1
        ? `Service '${name}' keeps its only principal's connection for plain requests: resource subscriptions need --per-user-connections of at least 2`
        : `Service '${name}' already has ${max - 1} of its ${max} principals' connections held by resource subscriptions (one is kept for plain requests); try again later`,
    limit: "per_user_connections",
    max,
    retryAfterSeconds: max === 1 ? null : 1
  })

/** A principal in a log line or a message: the first characters of its digest (never a key). */
export const principalWords = (principal: string): string => `'${principal.slice(0, 8)}'`
