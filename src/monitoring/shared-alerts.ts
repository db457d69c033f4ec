/**
 * The alerts of a cluster (docs/replicas-data.md): the replica that raises or resolves an alert
 * (the owner of the service, whose monitor sees its transitions) adds it to a capped Redis Stream,
 * `alerts`; every replica follows the stream and keeps the newest `LIMITS.alerts` of them, so
 * `/monitoring/alerts` on any replica lists the whole cluster's. A resolution names the service and
 * which of its alerts (those of held tools, all others, or all), not an alert: the replica that owns
 * a service now resolves the alerts a former owner raised, as a single process would. It is
 * published whether or not the raising was read back yet (the stream keeps their order), and
 * retried if it could not be.
 *
 * Bounded: the stream holds at most about `STREAM_LIMIT` entries (XADD MAXLEN ~), each replica at
 * most `LIMITS.alerts` alerts, and an alert's message is cut to `MESSAGE_LIMIT` characters (it may
 * quote a hostile upstream's error).
 */
import type { Alert, Monitor } from "./monitor.js"
import { LIMITS, resolves, TEXT_LIMIT } from "./monitor.js"
import { Ring } from "./bounded.js"
import { log } from "../logging/log.js"
import { clusterKey } from "../redis/key-names.js"
import { compareIds, type ClusterData } from "../records/redis-records.js"
import { followStream, type StreamEntry, type StreamFollower } from "../redis/stream-follower.js"

/** Entries kept in the stream: raisings and resolutions of the alerts each replica keeps. */
export const STREAM_LIMIT = 2 * LIMITS.alerts
/** An alert's message, at most (characters). */
export const MESSAGE_LIMIT = TEXT_LIMIT
/** Waits before the retries of a resolution that could not be published (ms). */
export const RESOLUTION_RETRIES_MS = [500, 1_000, 2_000, 4_000, 8_000, 16_000] as const

/** Which alerts of a service a resolution resolves, in the stream: `resolve`'s `held` true, false, undefined. */
type Resolved = "held" | "others" | "all"
const resolvedOf = (held: boolean | undefined): Resolved => (held === undefined ? "all" : held ? "held" : "others")
const heldOf = (which: Resolved): boolean | undefined => (which === "all" ? undefined : which === "held")

export class SharedAlerts {
  private readonly stream: string
  private readonly ring = new Ring<Alert>(LIMITS.alerts)
  private cursor = "0-0"
  private follower: StreamFollower | undefined
  private readonly listeners = new Set<(alert: Alert) => void>()
  private detach: (() => void) | undefined
  private readonly retries = new Set<NodeJS.Timeout>()

  private constructor(private readonly data: ClusterData) {
    this.stream = clusterKey(data.cluster, "alerts")
  }

  /** Reads the cluster's alerts and follows them. */
  static async open(data: ClusterData): Promise<SharedAlerts> {
    const alerts = new SharedAlerts(data)
    const newest = (await data.client.xRevRange(alerts.stream, "+", "-", { COUNT: STREAM_LIMIT })) as StreamEntry[]
    alerts.take(newest.reverse())
    alerts.follower = await followStream(data.client, alerts.stream, () => alerts.cursor, (entries) => alerts.take(entries), "alerts")
    return alerts
  }

  /**
   * Publishes the alerts `monitor` raises and resolves for the services this replica runs
   * (`runs`), makes its `alerts()` the cluster's, and relays the other replicas' alerts to its
   * live listeners (the event streams).
   */
  attach(monitor: Monitor, runs: (scope: string, name: string) => boolean = () => true): void {
    this.detach?.()
    const share = (alert: Alert) =>
      void this.publish(alert).catch((err: unknown) => log.warn(`an alert could not be shared: ${err instanceof Error ? err.message : String(err)}`, { event: "cluster_alert_failed" }))
    const off = monitor.subscribe((e) => {
      if (e.type === "alert" && !e.alert.resolved && !this.relaying && runs(e.alert.scope, e.alert.service_name)) share(e.alert)
    })
    // A service healthy again, holding no tool, or deleted, where it runs: its alerts are resolved, whichever replica
    // raised them. Published only when one may be open: every healthy transition resolves, and would fill the stream.
    monitor.resolvedHere = (scope, name, held, at, alerted) => {
      if (!runs(scope, name)) return
      const open = held !== false || alerted || this.ring.some((a) => !a.resolved && a.scope === scope && a.service_name === name)
      if (open) this.publishResolution(scope, name, resolvedOf(held), at)
    }
    const offRelay = this.onAlert((alert) => {
      if (this.raisedHere.has(alert.alert_id)) return
      this.relaying = true
      try {
        monitor.relayAlert(alert)
      } finally {
        this.relaying = false
      }
    })
    monitor.alertsHere = runs
    monitor.alertsFrom = () => this.alerts()
    this.detach = () => {
      off()
      offRelay()
      monitor.alertsHere = undefined
      monitor.alertsFrom = undefined
      monitor.resolvedHere = undefined
    }
  }

  /** Set while an alert read from the stream is relayed to the monitor's listeners (it is not shared again). */
  private relaying = false
  /** The ids of the alerts this replica raised, the newest `LIMITS.alerts` (their events were emitted here already). */
  private readonly raisedHere = new Set<string>()

  /** Adds a raised alert to the stream (resolutions go by `publishResolution`). */
  async publish(alert: Alert): Promise<void> {
    this.raisedHere.add(alert.alert_id)
    if (this.raisedHere.size > LIMITS.alerts) this.raisedHere.delete(this.raisedHere.values().next().value as string)
    await this.add({ k: "raised", a: JSON.stringify({ ...alert, message: alert.message.slice(0, MESSAGE_LIMIT) }) })
  }

  private add(message: Record<string, string>): Promise<unknown> {
    return this.data.client.xAdd(this.stream, "*", message, { TRIM: { strategy: "MAXLEN", strategyModifier: "~", threshold: STREAM_LIMIT } })
  }

  /** Adds a resolution to the stream, retried a while: an alert whose resolution is lost stays open on every replica. */
  private publishResolution(scope: string, name: string, which: Resolved, at: string, attempt = 0): void {
    this.add({ k: "resolved", s: scope, v: name, at, h: which }).catch((err: unknown) => {
      const wait = RESOLUTION_RETRIES_MS[attempt]
      const reason = err instanceof Error ? err.message : String(err)
      if (wait === undefined || this.detach === undefined) {
        log.warn(`an alert's resolution could not be shared: ${reason}`, { event: "cluster_alert_failed" })
        return
      }
      const timer = setTimeout(() => {
        this.retries.delete(timer)
        this.publishResolution(scope, name, which, at, attempt + 1)
      }, wait)
      timer.unref()
      this.retries.add(timer)
    })
  }

  private take(entries: ReadonlyArray<StreamEntry>): void {
    for (const e of entries) {
      if (compareIds(e.id, this.cursor) <= 0) continue
      this.cursor = e.id
      const m = e.message
      if (m["k"] === "raised") {
        let alert: Alert
        try {
          alert = JSON.parse(m["a"] ?? "") as Alert
        } catch {
          continue
        }
        this.ring.push(alert)
        for (const l of this.listeners) l(alert)
      } else if (m["k"] === "resolved" && m["s"] !== undefined && m["v"] !== undefined) {
        const [scope, name, held] = [m["s"], m["v"], heldOf((m["h"] ?? "all") as Resolved)]
        // Only the alerts raised by then: a resolution sent again after a failure may come after a newer raise.
        const at = m["at"] ?? ""
        for (const a of this.ring.toArray()) {
          if (resolves(a, scope, name, held) && (at === "" || a.timestamp <= at)) {
            a.resolved = true
            a.resolved_at = m["at"] ?? null
            for (const l of this.listeners) l(a)
          }
        }
      }
    }
  }

  /** Every replica's alerts, newest first. */
  alerts(): ReadonlyArray<Alert> {
    return this.ring.toArray().reverse()
  }

  /** Called with each alert raised or resolved by any replica, as read (tests wait on it). Returns the unsubscribe. */
  onAlert(listener: (alert: Alert) => void): () => void {
    this.listeners.add(listener)
    return () => void this.listeners.delete(listener)
  }

  /** Stops publishing and following (the store's client stays open: it is the store's). */
  async close(): Promise<void> {
    this.detach?.()
    this.detach = undefined
    for (const timer of this.retries) clearTimeout(timer)
    this.retries.clear()
    this.listeners.clear()
    await this.follower?.close()
  }
}
