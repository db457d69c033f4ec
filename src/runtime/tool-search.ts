/**
 * Search over a large catalog of tools (README, "Large catalogs"; docs/tool-search.md): one
 * full-text index of every scope's offered tools, ranked by BM25+ (MiniSearch) over their names,
 * titles, descriptions and parameter names (terms split at camelCase and `_`, stemmed), and filtered per caller at query time (its scope, the
 * services connected now, its key's allow-list). The index follows the catalog incrementally: a
 * query first compares each service of its scope with what was indexed (the tools list and the
 * definition, by identity: the actor replaces them only when they change) and re-indexes only the
 * services that changed; services and scopes that are gone are dropped. Nothing is rebuilt per
 * session or per query, no timer is held, and results are deterministic (scores rounded, ties by
 * callable name).
 */
import MiniSearch, { type SearchResult } from "minisearch"
import { stemmer } from "stemmer"
import { scopeLabel, type Scope, type ServiceDefinition } from "../domain/service-definition.js"
import { statusOf, type ServiceActorRef } from "../machines/service.js"
import type { ToolInfo } from "../mcp/types.js"
import { log } from "../logging/log.js"
import type { ScopeContext, StoreHost } from "./host.js"
import { isConnected, toolViews, type ToolView } from "./service-views.js"

/** The longest query taken (characters); a longer one is refused by the faces. */
export const MAX_QUERY_LENGTH = 500
/** The most results one query may ask for, and how many it gets unless it says. */
export const MAX_SEARCH_LIMIT = 50
export const DEFAULT_SEARCH_LIMIT = 10
/** The characters of a tool's description that are indexed (a description of a few KiB adds nothing to its ranking). */
const MAX_INDEXED_DESCRIPTION = 2000
/** The query terms used (the first distinct ones), and the longest term taken. */
const MAX_QUERY_TERMS = 32
const MAX_TERM_LENGTH = 64

/** A tool found by a query, with its score (higher is better). */
export interface ToolHit {
  readonly tool: ToolView
  readonly score: number
}

/** One indexed tool: its id (`<scope>\u0000<callable name>`) and the text of each searched field. */
interface ToolDocument {
  readonly id: string
  readonly scope: string
  readonly service: string
  readonly name: string
  /** The words of the callable name: the service's and the tool's (`github__create_issue`: github create issue). */
  readonly words: string
  readonly title: string
  readonly description: string
  /** The input schema's parameter names (its top-level `properties`). */
  readonly params: string
}

/** What a service's documents were built from, to tell when they are stale. */
interface IndexedService {
  readonly tools: ReadonlyArray<ToolInfo>
  readonly definition: ServiceDefinition
  /** The tools held for a changed definition (src/runtime/tool-pins.ts): not searched until accepted. */
  readonly held: ReadonlyArray<unknown>
  readonly documents: ReadonlyArray<ToolDocument>
  /** Callable name -> the tool as listed (the views of the snapshot it was indexed from). */
  readonly views: ReadonlyMap<string, ToolView>
}

interface IndexedScope {
  readonly scope: Scope
  /** The scope's services record when last synced (the store replaces it when a service is added or removed). */
  record: Readonly<Record<string, ServiceActorRef>>
  readonly services: Map<string, IndexedService>
}

/** Words that say nothing about a tool; left out of the index and of queries. */
const STOP_WORDS: ReadonlySet<string> = new Set(
  "a an and are as at be by can do does for from how i if in into is it its me my of on or our please so some that the their them then this to us use using want we what when which will with you your".split(" ")
)

/**
 * A text's terms: split on anything but letters and digits, and at camelCase and letter/digit
 * boundaries (`getFileInfo`: get file info; `read_file`: read file), lower-cased.
 */
export const termsOf = (text: string): Array<string> =>
  text
    .replace(/([\p{Ll}\p{N}])(\p{Lu})/gu, "$1 $2")
    .replace(/(\p{Lu})(\p{Lu}\p{Ll})/gu, "$1 $2")
    .split(/[^\p{L}\p{N}]+/u)
    .filter((t) => t !== "")
    .map((t) => t.toLowerCase())

/** A term as indexed and searched: stop words and single characters dropped, the rest stemmed (Porter: `issues`, `issuing` -> `issu`). */
const processTerm = (term: string): string | null => (term.length < 2 || STOP_WORDS.has(term) ? null : stemmer(term))

const paramNames = (schema: Record<string, unknown>): string => {
  const properties = schema["properties"]
  return typeof properties === "object" && properties !== null && !Array.isArray(properties) ? Object.keys(properties).join(" ") : ""
}

/** A score as compared: rounded, so that sums made in another order rank alike (ties then go by name). */
const rounded = (score: number): number => Math.round(score * 1e6) / 1e6

/**
 * The store's tool index (one per store: the `ToolSearchService` part, src/runtime/store-parts.ts).
 * Not shared between processes: in replica mode each replica indexes the scopes its callers
 * search, from the views it has.
 */
export class ToolSearchIndex {
  private readonly index = new MiniSearch<ToolDocument>({
    fields: ["words", "title", "description", "params"],
    storeFields: ["scope", "service", "name"],
    tokenize: termsOf,
    processTerm,
    // Nothing is discarded (documents are removed whole), so nothing is left to vacuum: no timer.
    autoVacuum: false,
    searchOptions: {
      boost: { words: 3, title: 2, params: 1.5, description: 1 },
      prefix: (term) => term.length >= 3,
      fuzzy: (term) => (term.length >= 5 ? 0.2 : false),
      combineWith: "OR"
    }
  })
  private readonly scopes = new Map<string, IndexedScope>()

  constructor(private readonly host: Pick<StoreHost, "serviceActors">) {}

  /**
   * The tools of `ctx`'s scope that best match `query`, at most `limit`, best first: only tools of
   * services connected now that the caller's key lets through (`ctx.gate`), and that `also` keeps.
   */
  search(ctx: ScopeContext, query: string, limit: number, also?: (tool: ToolView) => boolean): ReadonlyArray<ToolHit> {
    const scope = this.sync(ctx.scope)
    this.prune(ctx.label)
    const connected = new Set<string>()
    for (const [name, actor] of Object.entries(scope.record)) if (isConnected(statusOf(actor.getSnapshot()))) connected.add(name)
    // Distinct terms, each at most MAX_TERM_LENGTH characters (a longer one is nobody's word): a hostile query costs little.
    const terms = [...new Set(termsOf(query.slice(0, MAX_QUERY_LENGTH)).filter((t) => t.length <= MAX_TERM_LENGTH))].slice(0, MAX_QUERY_TERMS)
    if (terms.length === 0) return []
    const gate = ctx.gate
    const viewOf = (r: SearchResult) => scope.services.get(r["service"] as string)?.views.get(r["name"] as string)
    const results = this.index.search(terms.join(" "), {
      filter: (r) => {
        if (r["scope"] !== ctx.label || !connected.has(r["service"] as string)) return false
        if (gate !== undefined && !gate.allows(r["name"] as string)) return false
        if (also === undefined) return true
        const view = viewOf(r)
        return view !== undefined && also(view)
      }
    })
    const hits: Array<ToolHit> = []
    for (const r of results) {
      const tool = viewOf(r)
      if (tool !== undefined) hits.push({ tool, score: rounded(r.score) })
    }
    hits.sort((a, b) => b.score - a.score || (a.tool.name < b.tool.name ? -1 : a.tool.name > b.tool.name ? 1 : 0))
    return hits.slice(0, Math.max(0, limit))
  }

  /** What the index holds: tools (documents), distinct terms, scopes. */
  stats(): { readonly tools: number; readonly terms: number; readonly scopes: number } {
    return { tools: this.index.documentCount, terms: this.index.termCount, scopes: this.scopes.size }
  }

  /** Brings a scope's documents up to date with its services (only the changed ones re-indexed). */
  private sync(scope: Scope): IndexedScope {
    const label = scopeLabel(scope)
    const record = this.host.serviceActors(scope)
    let indexed = this.scopes.get(label)
    if (indexed === undefined) this.scopes.set(label, (indexed = { scope, record, services: new Map() }))
    for (const [name, actor] of Object.entries(record)) {
      const snapshot = actor.getSnapshot()
      const { tools, definition, heldTools: held } = snapshot.context
      const before = indexed.services.get(name)
      if (before !== undefined && before.tools === tools && before.definition === definition && before.held === held) continue
      if (before !== undefined) this.index.removeAll(before.documents as Array<ToolDocument>)
      // A name listed twice by its server is indexed once (the first, as a call resolves it).
      const byName = new Map<string, ToolView>()
      for (const v of toolViews(snapshot)) if (!byName.has(v.name)) byName.set(v.name, v)
      const views = [...byName.values()]
      const documents = views.map((t) => documentOf(label, t))
      this.index.addAll(documents)
      indexed.services.set(name, { tools, definition, held, documents, views: byName })
      log.debug(`tool search: ${label}/${name} indexed (${documents.length} tools)`, { event: "tool_index_updated", scope: label, service_name: name })
    }
    if (indexed.record !== record) this.dropGone(indexed, record)
    indexed.record = record
    // A scope with no service is not kept (a query for any agent id holds nothing).
    if (indexed.services.size === 0) this.scopes.delete(label)
    return indexed
  }

  /** Drops the services of other scopes that are gone (a removed service, a removed agent's scope). */
  private prune(except: string): void {
    for (const [label, indexed] of this.scopes) {
      if (label === except) continue
      const record = this.host.serviceActors(indexed.scope)
      if (record === indexed.record) continue
      this.dropGone(indexed, record)
      indexed.record = record
      if (indexed.services.size === 0) this.scopes.delete(label)
    }
  }

  private dropGone(indexed: IndexedScope, record: Readonly<Record<string, ServiceActorRef>>): void {
    for (const [name, service] of indexed.services) {
      if (Object.hasOwn(record, name)) continue
      this.index.removeAll(service.documents as Array<ToolDocument>)
      indexed.services.delete(name)
    }
  }
}

const documentOf = (scope: string, t: ToolView): ToolDocument => ({
  id: `${scope}\u0000${t.name}`,
  scope,
  service: t.service_name,
  name: t.name,
  words: `${t.service_name} ${t.original_name}`,
  title: t.title ?? "",
  description: t.description.slice(0, MAX_INDEXED_DESCRIPTION),
  params: paramNames(t.inputSchema)
})
