/**
 * Relays upstream services' log messages (`notifications/message`) to the MCP endpoint's sessions
 * (src/http/gateway/endpoint.ts), and sets the upstreams' level from what those sessions asked for
 * (docs/logging.md). It exists apart from the endpoint because it owns its own state: one listener
 * and one rate limit per upstream connection, and the level last sent to each.
 *
 * - A message of service `s` goes to every session of `s`'s scope whose level (`logging/setLevel`,
 *   none set: every level) lets it through, its `logger` renamed `s` or `s/<logger>`; and to every
 *   2026-07-28 call to `s` in flight that asked for log messages (its request's `_meta` level).
 * - Each connection has a token bucket (`RATE_PER_SECOND`, bursts of `BURST`): what is over it is
 *   dropped at once (O(1), nothing queued), counted, and reported in one log line per burst of
 *   drops, so a flooding upstream costs neither memory nor more than the SDK's own parse per message.
 * - Upstream level: the most verbose level any session of the scope set, sent as `logging/setLevel`
 *   to every service of the scope that declared `logging` when that level changes and to a service
 *   when it connects; before any session set a level nothing is sent (the upstream's default).
 *   When the last session that set a level goes, the upstream keeps the level it was last sent.
 */
import { LoggingLevelSchema } from "@modelcontextprotocol/core"
import type { LoggingLevel, LoggingMessageNotification, Server } from "@modelcontextprotocol/server"
import type { McpConnection } from "../../mcp/types.js"
import { log } from "../../logging/log.js"

/** Messages a connection may relay per second, on average. */
export const LOG_RATE_PER_SECOND = 50
/** Messages a connection may relay at once after a quiet spell. */
export const LOG_BURST = 100
/** How long a logging/setLevel sent upstream may take. */
const SET_LEVEL_TIMEOUT_MS = 10_000
/** How often a flood's drops are reported while it lasts. */
const REPORT_EVERY_MS = 10_000

const SEVERITY: ReadonlyMap<LoggingLevel, number> = new Map(LoggingLevelSchema.options.map((level, index) => [level, index]))
const severity = (level: LoggingLevel): number => SEVERITY.get(level) ?? 0

/** Whether a message of `level` passes a session whose level is `threshold` (none: every message). */
export const passes = (level: LoggingLevel, threshold: LoggingLevel | undefined): boolean =>
  threshold === undefined || severity(level) >= severity(threshold)

/** A session as the relay sees it. */
export interface LogSession {
  readonly server: Server
  /** The level the session asked for with logging/setLevel, if it did. */
  readonly logLevel: LoggingLevel | undefined
}

interface Watched {
  readonly scope: string
  readonly service: string
  readonly connection: McpConnection
  readonly off: () => void
  tokens: number
  refilledAt: number
  /** Dropping began and the bucket has not filled up since. */
  flooding: boolean
  /** Messages dropped since the last report, and when that was. */
  dropped: number
  reportedAt: number
  /** The level last sent upstream on this connection. */
  sentLevel: LoggingLevel | undefined
}

/** A request that hears one service's log messages while it lasts (a 2026-07-28 call with a log level in its `_meta`). */
interface Hearer {
  readonly scope: string
  readonly service: string
  readonly level: LoggingLevel
  readonly send: (message: LoggingMessageNotification["params"]) => void
}

export class LogRelay {
  /** By `<scope label>\n<service>`: the connection listened to. */
  private readonly watched = new Map<string, Watched>()
  private readonly hearers = new Set<Hearer>()

  constructor(
    /** The open sessions of a scope (by label). */
    private readonly sessionsOf: (scope: string) => Iterable<LogSession>
  ) {}

  /** Listens to a service's current connection (none: stops listening); a new connection gets the scope's level. */
  watch(scope: string, service: string, connection: McpConnection | undefined): void {
    const key = `${scope}\n${service}`
    const current = this.watched.get(key)
    if (current?.connection === connection) return
    if (current !== undefined) this.unwatchKey(key, current)
    if (connection === undefined) return
    const entry: Watched = { scope, service, connection, off: () => undefined, tokens: LOG_BURST, refilledAt: performance.now(), flooding: false, dropped: 0, reportedAt: 0, sentLevel: undefined }
    Object.assign(entry, { off: connection.onLogMessage((message) => this.relay(entry, message)) })
    this.watched.set(key, entry)
    this.sendLevel(entry, this.wantedLevel(scope))
  }

  /** Stops listening to a service (removed). */
  unwatch(scope: string, service: string): void {
    const key = `${scope}\n${service}`
    const current = this.watched.get(key)
    if (current !== undefined) this.unwatchKey(key, current)
  }

  /**
   * A request hears `service`'s log messages at `level` or above until the returned function is
   * called (its call ended): the 2026-07-28 era has no session to set a level on, and a request
   * says its level in `_meta`. Its level counts toward the level sent upstream, as a session's does.
   */
  hear(scope: string, service: string, level: LoggingLevel, send: Hearer["send"]): () => void {
    const hearer: Hearer = { scope, service, level, send }
    this.hearers.add(hearer)
    this.levelsChanged(scope)
    return () => void this.hearers.delete(hearer)
  }

  /** A session of the scope set its level, or left: sends the scope's new level upstream if it changed. */
  levelsChanged(scope: string): void {
    const wanted = this.wantedLevel(scope)
    for (const entry of this.watched.values()) if (entry.scope === scope) this.sendLevel(entry, wanted)
  }

  close(): void {
    for (const [key, entry] of this.watched) this.unwatchKey(key, entry)
  }

  private unwatchKey(key: string, entry: Watched): void {
    entry.off()
    this.watched.delete(key)
    this.reportDropped(entry)
  }

  /** The most verbose level a session of the scope asked for, if any did. */
  private wantedLevel(scope: string): LoggingLevel | undefined {
    let wanted: LoggingLevel | undefined
    for (const session of this.sessionsOf(scope)) {
      const level = session.logLevel
      if (level !== undefined && (wanted === undefined || severity(level) < severity(wanted))) wanted = level
    }
    for (const hearer of this.hearers) if (hearer.scope === scope && (wanted === undefined || severity(hearer.level) < severity(wanted))) wanted = hearer.level
    return wanted
  }

  private sendLevel(entry: Watched, level: LoggingLevel | undefined): void {
    if (level === undefined || level === entry.sentLevel || !entry.connection.logging) return
    entry.sentLevel = level
    entry.connection.setLoggingLevel(level, { timeoutMs: SET_LEVEL_TIMEOUT_MS }).catch((e: unknown) => {
      log.warn(`${entry.scope}/${entry.service} logging/setLevel ${level} failed: ${e instanceof Error ? e.message : String(e)}`, { event: "set_level_failed" })
    })
  }

  private relay(entry: Watched, message: LoggingMessageNotification["params"]): void {
    if (!this.admit(entry)) return
    const level = message.level
    const logger = typeof message.logger === "string" && message.logger !== "" ? `${entry.service}/${message.logger}` : entry.service
    const relayed = { ...message, logger }
    for (const session of this.sessionsOf(entry.scope)) {
      if (passes(level, session.logLevel)) session.server.sendLoggingMessage(relayed).catch(() => undefined)
    }
    for (const hearer of this.hearers) if (hearer.scope === entry.scope && hearer.service === entry.service && passes(level, hearer.level)) hearer.send(relayed)
  }

  /**
   * The connection's token bucket: true when the message may go; a drop is counted, not queued.
   * A flood is reported when it begins, then its drops at most every `REPORT_EVERY_MS`, and once
   * more when it ends (the bucket full again) or the connection goes.
   */
  private admit(entry: Watched): boolean {
    const now = performance.now()
    entry.tokens = Math.min(LOG_BURST, entry.tokens + ((now - entry.refilledAt) / 1000) * LOG_RATE_PER_SECOND)
    entry.refilledAt = now
    if (entry.tokens >= 1) {
      if (entry.flooding && (entry.tokens >= LOG_BURST || now - entry.reportedAt >= REPORT_EVERY_MS)) {
        this.reportDropped(entry)
        entry.flooding = entry.tokens < LOG_BURST
      }
      entry.tokens -= 1
      return true
    }
    if (!entry.flooding) {
      entry.flooding = true
      entry.reportedAt = now
      log.warn(`${entry.scope}/${entry.service} sends log messages faster than ${LOG_RATE_PER_SECOND}/s: dropping the excess`, { event: "log_messages_dropped" })
    }
    entry.dropped += 1
    return false
  }

  private reportDropped(entry: Watched): void {
    entry.reportedAt = performance.now()
    if (entry.dropped === 0) return
    log.warn(`${entry.scope}/${entry.service}: ${entry.dropped} log messages dropped (over ${LOG_RATE_PER_SECOND}/s)`, { event: "log_messages_dropped", dropped: entry.dropped })
    entry.dropped = 0
  }
}
