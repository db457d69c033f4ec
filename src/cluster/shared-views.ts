/**
 * The views of the services in a cluster (docs/replicas.md, "Views"): the replica that owns a
 * service publishes what its actor shows (status, figures, transitions, tools...) and every other
 * replica shows it through its mirroring actor (src/machines/replicated.ts), so lists, status and
 * `wait_service` answer the same on any replica.
 *
 * In Redis: hash `views` (field `serviceField` → the light view, for replicas that start or come
 * back later), hash `catalogs` (field → the tools, resources, templates and prompts, written only
 * when they change: a health check must not copy a large tool list), and one pub/sub channel
 * `views` whose messages carry the light view, so a wait on another replica ends as soon as the
 * message arrives. The owner's writes of one turn go in one MULTI; a replica that missed messages
 * (Redis away, started late) reads the hash again (`all`).
 *
 * Bounded: text an upstream controls (errors, reasons, stderr lines) is cut before it travels; a
 * message larger than `MAX_VIEW_CHARS` is not taken.
 */
import type { PublishedView } from "../machines/replicated.js"
import type { Catalog, CatalogCapabilities, McpConnection, ToolInfo } from "../mcp/types.js"
import { log } from "../logging/log.js"
import type { Redis } from "../redis/connection.js"
import { clusterKey } from "../redis/key-names.js"

/** What the forwarding connection shows of the owner's live connection. */
export interface ConnectionFacts {
  readonly transportType: McpConnection["transportType"]
  readonly serverInfo: McpConnection["serverInfo"]
  readonly capabilities: CatalogCapabilities
  readonly logging: boolean
  /** The last lines of the owner's process's stderr (at most `STDERR_LINES`). */
  readonly stderr: ReadonlyArray<string>
}

/** A view as it travels: without its tools and catalog (`catalogTag` names the ones that go with it). */
export interface WireView {
  readonly view: Omit<PublishedView, "tools" | "catalog">
  readonly owner: string
  /** Where the owner is reached, as it advertised itself when it published the view ("" before it listened). */
  readonly url?: string | undefined
  readonly facts: ConnectionFacts | undefined
  /** Changes whenever the tools or the catalog do (owner and versions). */
  readonly catalogTag: string
}

/** The tools and catalog of a `catalogTag`. */
export interface WireCatalog {
  readonly tag: string
  readonly tools: ReadonlyArray<ToolInfo>
  readonly catalog: Catalog
}

/** Longest text of an upstream's that travels (an error, a reason, a stderr line). */
export const MAX_TEXT_CHARS = 2000
/** Lines of stderr that travel. */
export const STDERR_LINES = 50
/** A view message larger than this is refused (characters of JSON). */
export const MAX_VIEW_CHARS = 1024 * 1024

const cut = (text: string | undefined): string | undefined => (text === undefined || text.length <= MAX_TEXT_CHARS ? text : `${text.slice(0, MAX_TEXT_CHARS)}…`)

/** The facts of a live connection, bounded. */
export const factsOf = (connection: McpConnection | undefined): ConnectionFacts | undefined =>
  connection === undefined
    ? undefined
    : {
        transportType: connection.transportType,
        serverInfo: connection.serverInfo,
        capabilities: connection.capabilities,
        logging: connection.logging,
        stderr: connection.stderrTail().slice(-STDERR_LINES).map((line) => cut(line) as string)
      }

/** The light part of a view, with the text an upstream controls cut. */
const lightView = (view: PublishedView): WireView["view"] => {
  const { tools: _t, catalog: _c, ...rest } = view
  return {
    ...rest,
    reason: cut(rest.reason) as string,
    lastError: cut(rest.lastError),
    hint: cut(rest.hint),
    transitions: rest.transitions.map((t) => ({ ...t, reason: cut(t.reason) as string })),
    crash: rest.crash === undefined ? undefined : { ...rest.crash, error: cut(rest.crash.error) as string }
  }
}

const parse = <T>(text: string | null | undefined, what: string): T | undefined => {
  if (text === null || text === undefined) return undefined
  if (text.length > MAX_VIEW_CHARS * 32) {
    log.warn(`cluster ${what} is too large (${text.length} characters); not taken`, { event: "cluster_view_refused" })
    return undefined
  }
  try {
    return JSON.parse(text) as T
  } catch {
    log.warn(`cluster ${what} is not JSON; not taken`, { event: "cluster_view_refused" })
    return undefined
  }
}

interface Pending {
  readonly view: PublishedView
  readonly facts: ConnectionFacts | undefined
}

/** The views of one cluster: published by owners, followed by everyone. */
export class SharedViews {
  readonly #views: string
  readonly #catalogs: string
  readonly #channel: string
  /** Views to publish at the end of this turn, by service field (the last one of a field wins). */
  readonly #pending = new Map<string, Pending>()
  /** The catalog tag last written per owned field. */
  readonly #written = new Map<string, string>()
  #flushing = false
  #closed = false

  constructor(
    private readonly client: Redis,
    private readonly subscriber: Redis,
    cluster: string,
    private readonly replicaId: string,
    /** This replica's advertised URL, written into each view it publishes. */
    private readonly url: () => string = () => ""
  ) {
    this.#views = clusterKey(cluster, "views")
    this.#catalogs = clusterKey(cluster, "catalogs")
    this.#channel = clusterKey(cluster, "views-changed")
  }

  /** Follows the views other replicas publish; `listener` gets each (its own included: skip those). */
  async follow(listener: (field: string, view: WireView) => void): Promise<void> {
    await this.subscriber.subscribe(this.#channel, (message) => {
      const m = message.length > MAX_VIEW_CHARS ? undefined : parse<{ field: string; view: WireView }>(message, "view message")
      if (m === undefined || typeof m.field !== "string" || typeof m.view !== "object" || m.view === null) return
      listener(m.field, m.view)
    })
  }

  /** Publishes the view of an owned service at the end of this turn (views of one turn go together). */
  publish(field: string, view: PublishedView, connection: McpConnection | undefined): void {
    if (this.#closed) return
    this.#pending.set(field, { view, facts: factsOf(connection) })
    if (this.#flushing) return
    this.#flushing = true
    setImmediate(() => void this.#flush())
  }

  /** Writes the views of this turn, in one MULTI (a failure is a debug line: the owner publishes again when Redis is back). */
  async #flush(): Promise<void> {
    const batch = [...this.#pending]
    this.#pending.clear()
    this.#flushing = false
    if (batch.length === 0 || this.#closed) return
    const multi = this.client.multi()
    const tags: Array<[string, string]> = []
    for (const [field, { view, facts }] of batch) {
      const catalogTag = `${this.replicaId}:${view.toolsVersion}:${view.catalogVersion}`
      if (this.#written.get(field) !== catalogTag) {
        const catalog: WireCatalog = { tag: catalogTag, tools: view.tools, catalog: view.catalog }
        multi.hSet(this.#catalogs, field, JSON.stringify(catalog))
        tags.push([field, catalogTag])
      }
      const wire: WireView = { view: lightView(view), owner: this.replicaId, url: this.url(), facts, catalogTag }
      const json = JSON.stringify(wire)
      multi.hSet(this.#views, field, json)
      multi.publish(this.#channel, `{"field":${JSON.stringify(field)},"view":${json}}`)
    }
    try {
      await multi.exec()
      for (const [field, tag] of tags) this.#written.set(field, tag)
    } catch (e) {
      // Redis away: the owner publishes again when it is back (Cluster's return); nothing else to do now.
      log.debug(`cluster views not published (${(e as Error).message})`, { event: "cluster_view_failed" })
    }
  }

  /** Forgets what was written for a field, so its next view writes the catalog again. */
  rewrite(field: string): void {
    this.#written.delete(field)
  }

  /** Removes a service's view and catalog (it was deleted, by its owner). */
  async remove(field: string): Promise<void> {
    this.#written.delete(field)
    this.#pending.delete(field)
    await this.client.hDel(this.#views, field)
    await this.client.hDel(this.#catalogs, field)
  }

  /** Every view Redis holds now. */
  async all(): Promise<Map<string, WireView>> {
    const out = new Map<string, WireView>()
    const entries = await this.client.hGetAll(this.#views)
    for (const [field, json] of Object.entries(entries)) {
      const view = parse<WireView>(json, `view of ${field}`)
      if (view !== undefined) out.set(field, view)
    }
    return out
  }

  /** The tools and catalog of a service as last written by its owner. */
  async catalog(field: string): Promise<WireCatalog | undefined> {
    return parse<WireCatalog>(await this.client.hGet(this.#catalogs, field), `catalog of ${field}`)
  }

  /** Removes the views of services no longer defined (the leader's clean-up). */
  async prune(defined: ReadonlySet<string>): Promise<void> {
    const fields = await this.client.hKeys(this.#views)
    const gone = fields.filter((f) => !defined.has(f))
    if (gone.length === 0) return
    await this.client.hDel(this.#views, gone)
    await this.client.hDel(this.#catalogs, gone)
  }

  close(): void {
    this.#closed = true
    this.#pending.clear()
  }
}
