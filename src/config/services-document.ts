/**
 * The services file's document (shared/LIFECYCLE.md, Persistence): the `mcpServers` format MCP
 * clients use, plus an `agents` section, and agent services stored under `<name>_byagent_<agent>`
 * keys. Parsing and shape checks of a file's text, the definitions it holds, and the draft that
 * `ServicesFile.update` changes. The file is someone's document: unknown fields and the keys
 * services were read from are kept. Its objects, and the records of definitions read from it, have
 * a null prototype (src/domain/dict.ts): a service "constructor" or an agent "__proto__" is a key
 * like any other. No I/O here: src/config/services-file.ts reads and writes.
 */
import { Either, ParseResult, Schema } from "effect"
import { dict, nullPrototypeJson, parseJsonDict } from "../domain/dict.js"
import { agentIdProblem, serviceNameProblem } from "../domain/schemas.js"
import type { Scope, ServiceDefinition } from "../domain/service.js"

/** Every service definition of the file, by scope. Frozen: a snapshot, not a handle. */
export interface ServicesConfig {
  readonly store: Readonly<Record<string, ServiceDefinition>>
  readonly agents: Readonly<Record<string, Readonly<Record<string, ServiceDefinition>>>>
}

/**
 * The file cannot be read, parsed, created, written or watched. The message starts with the path;
 * `detail` is the rest (for a parse error, the parser's message with line and column).
 */
export class ServicesFileError extends Error {
  readonly _tag = "ServicesFileError"
  override readonly name = "ServicesFileError"
  constructor(
    readonly path: string,
    readonly detail: string,
    options?: ErrorOptions
  ) {
    super(`${path}: ${detail}`, options)
  }
}

/**
 * A working copy of the document handed to `ServicesFile.update`: every change made through it is
 * written in one go when the mutate function returns. Invalid names or agent ids throw a
 * `RangeError`, which rejects the update with nothing written.
 */
export interface ServicesDraft {
  /** The definition of `name` in `scope`, or undefined. */
  getService(scope: Scope, name: string): ServiceDefinition | undefined
  /**
   * Adds or replaces a definition. An agent service that was read from a `<name>_byagent_<agent>`
   * key is written back to that key; a new one goes to `agents.<agent>.mcpServers.<name>`.
   */
  setService(scope: Scope, name: string, definition: ServiceDefinition): void
  /** Removes a definition (from every place it was read from); false when there was none. */
  removeService(scope: Scope, name: string): boolean
  /** Removes an agent and all its services; false when it had none. */
  removeAgent(agentId: string): boolean
  /** Removes every store-scope service; returns how many there were. */
  clearStore(): number
  /** Removes every service of every scope; other top-level fields of the document are kept. */
  clearAll(): void
  /** Replaces the whole document (checked like a file on open; throws `ServicesFileError` when malformed). */
  replaceDocument(document: unknown): void
  /** The definitions as they stand in this draft. */
  view(): ServicesConfig
}

const BY_AGENT = "_byagent_"

/** A JSON object of the document (null prototype). */
export type JsonObject = Record<string, unknown>

const isObject = (v: unknown): v is JsonObject => typeof v === "object" && v !== null && !Array.isArray(v)

/** Own property or undefined: file keys such as `__proto__` must not reach the prototype. */
const own = (obj: unknown, key: string): unknown => (isObject(obj) && Object.hasOwn(obj, key) ? obj[key] : undefined)

const setOwn = (obj: JsonObject, key: string, value: unknown): void => {
  Object.defineProperty(obj, key, { value, enumerable: true, writable: true, configurable: true })
}

/** `weather_byagent_agent-1` -> { name: "weather", agentId: "agent-1" }; undefined for a store key. */
const splitByAgentKey = (key: string): { readonly name: string; readonly agentId: string } | undefined => {
  const at = key.indexOf(BY_AGENT)
  if (at <= 0 || at + BY_AGENT.length >= key.length) return undefined
  return { name: key.slice(0, at), agentId: key.slice(at + BY_AGENT.length) }
}

/** The file's text for a document: two-space indented JSON and a final newline. */
export const serialize = (doc: JsonObject): string => `${JSON.stringify(doc, null, 2)}\n`

const deepFreeze = <T>(value: T): T => {
  if (typeof value === "object" && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value)
    for (const v of Object.values(value)) deepFreeze(v)
  }
  return value
}

/** An object (null prototype or not) whose values are checked by `value`. */
const objectOf = <A, I>(value: Schema.Schema<A, I>, message: string) =>
  Schema.Record({ key: Schema.String, value }).annotations({ message: () => message })

/** A section of service definitions. Each must be an object; whether it is usable is decided per service (`resolveDefinition`). */
const Definitions = objectOf(objectOf(Schema.Unknown, "must be an object (a service definition)"), "must be an object of service definitions")

/**
 * The document's shape: `mcpServers`, and `agents` each with its own `mcpServers`; any other
 * field is kept as it is. A definition that is an object but not usable (a hand edit half done)
 * does not make the file unreadable: that service alone is refused when it is resolved.
 */
const ServicesDocument = Schema.Struct(
  {
    mcpServers: Schema.optionalWith(Definitions, { exact: true }),
    agents: Schema.optionalWith(
      objectOf(
        Schema.Struct({ mcpServers: Schema.optionalWith(Definitions, { exact: true }) }, Schema.Record({ key: Schema.String, value: Schema.Unknown })).annotations({
          message: () => "must be an object with \"mcpServers\""
        }),
        "must be an object of agents"
      ),
      { exact: true }
    )
  },
  Schema.Record({ key: Schema.String, value: Schema.Unknown })
).annotations({ message: () => "the top level must be a JSON object" })

const checkDocument = Schema.decodeUnknownEither(ServicesDocument)

/** Why a parsed document cannot be used (its first problem, the field quoted), or undefined when its shape is right. */
const shapeProblem = (doc: unknown): string | undefined => {
  const checked = checkDocument(doc)
  if (Either.isRight(checked)) return undefined
  const [first] = ParseResult.ArrayFormatter.formatErrorSync(checked.left)
  if (first === undefined) return "not a services document"
  return first.path.length === 0 ? first.message : `"${first.path.map(String).join(".")}" ${first.message}`
}

const withLineAndColumn = (message: string, text: string): string => {
  const position = /at position (\d+)/.exec(message)
  if (position === null || /line \d+/.test(message)) return message
  const before = text.slice(0, Number(position[1]))
  const line = before.split("\n").length
  const column = before.length - before.lastIndexOf("\n")
  return `${message} (line ${line}, column ${column})`
}

/** Parses and checks the file's content; throws `ServicesFileError` naming the path and the problem. */
export const parseDocument = (path: string, text: string): JsonObject => {
  const body = text.replace(/^\uFEFF/, "")
  let doc: unknown
  try {
    doc = parseJsonDict(body)
  } catch (e) {
    throw new ServicesFileError(path, `not valid JSON: ${withLineAndColumn((e as Error).message, body)}`, { cause: e })
  }
  const problem = shapeProblem(doc)
  if (problem !== undefined) throw new ServicesFileError(path, `not a services file: ${problem}`)
  return doc as JsonObject
}

/** The definitions of a document; the `agents` section wins over a `_byagent_` key for the same service. */
export const configOf = (doc: JsonObject): ServicesConfig => {
  const store = new Map<string, ServiceDefinition>()
  const agents = new Map<string, Map<string, ServiceDefinition>>()
  const agentMap = (agentId: string): Map<string, ServiceDefinition> => {
    let m = agents.get(agentId)
    if (m === undefined) {
      m = new Map()
      agents.set(agentId, m)
    }
    return m
  }
  const servers = own(doc, "mcpServers")
  if (isObject(servers)) {
    for (const [key, def] of Object.entries(servers)) {
      const byAgent = splitByAgentKey(key)
      if (byAgent === undefined) store.set(key, def as ServiceDefinition)
      else agentMap(byAgent.agentId).set(byAgent.name, def as ServiceDefinition)
    }
  }
  const agentsSection = own(doc, "agents")
  if (isObject(agentsSection)) {
    for (const [agentId, agent] of Object.entries(agentsSection)) {
      const m = agentMap(agentId)
      const agentServers = own(agent, "mcpServers")
      if (isObject(agentServers)) {
        for (const [name, def] of Object.entries(agentServers)) m.set(name, def as ServiceDefinition)
      }
    }
  }
  const copy = (m: Map<string, ServiceDefinition>) => dict([...m].map(([name, def]) => [name, nullPrototypeJson(def) as ServiceDefinition]))
  return deepFreeze({ store: copy(store), agents: dict([...agents].map(([id, m]) => [id, copy(m)])) })
}

/** Names and agent ids written to the file follow the domain's rules (`ServiceName`, `AgentId`). */
const checkScopeAndName = (scope: Scope, name: string): void => {
  const nameProblem = serviceNameProblem(name)
  if (nameProblem !== undefined) throw new RangeError(`service name "${name}" ${nameProblem}`)
  if (scope.kind === "agent") {
    const idProblem = agentIdProblem(scope.agentId)
    if (idProblem !== undefined) throw new RangeError(`agent id "${scope.agentId}" ${idProblem}`)
  }
}

/** The draft given to `ServicesFile.update`; works on its own deep copy of the document. */
export class DocumentDraft implements ServicesDraft {
  #open = true

  constructor(
    public doc: JsonObject,
    private readonly path: string
  ) {}

  close(): void {
    this.#open = false
  }

  #guard(): void {
    if (!this.#open) throw new Error("a services draft is only usable inside its update()")
  }

  #child(parent: JsonObject, key: string): JsonObject {
    const existing = own(parent, key)
    if (isObject(existing)) return existing
    const created: JsonObject = dict()
    setOwn(parent, key, created)
    return created
  }

  #agentServers(agentId: string): JsonObject | undefined {
    const servers = own(own(this.doc, "agents"), agentId)
    const section = own(servers, "mcpServers")
    return isObject(section) ? section : undefined
  }

  #storeServers(): JsonObject | undefined {
    const servers = own(this.doc, "mcpServers")
    return isObject(servers) ? servers : undefined
  }

  /** Drops an agent left without services (and `agents` left without agents), unless they hold other fields. */
  #prune(agentId: string): void {
    const agents = own(this.doc, "agents")
    if (!isObject(agents)) return
    const agent = own(agents, agentId)
    if (isObject(agent)) {
      const servers = own(agent, "mcpServers")
      const onlyServers = Object.keys(agent).every((k) => k === "mcpServers")
      if (onlyServers && (servers === undefined || (isObject(servers) && Object.keys(servers).length === 0))) {
        delete agents[agentId]
      }
    }
    if (Object.keys(agents).length === 0) delete this.doc["agents"]
  }

  getService(scope: Scope, name: string): ServiceDefinition | undefined {
    this.#guard()
    const def =
      scope.kind === "store"
        ? splitByAgentKey(name) === undefined
          ? own(this.#storeServers(), name)
          : undefined
        : (own(this.#agentServers(scope.agentId), name) ?? own(this.#storeServers(), `${name}${BY_AGENT}${scope.agentId}`))
    return isObject(def) ? (nullPrototypeJson(def) as ServiceDefinition) : undefined
  }

  setService(scope: Scope, name: string, definition: ServiceDefinition): void {
    this.#guard()
    checkScopeAndName(scope, name)
    if (!isObject(definition)) throw new RangeError(`the definition of "${name}" must be an object`)
    const def = nullPrototypeJson(definition) as JsonObject
    if (scope.kind === "store") {
      setOwn(this.#child(this.doc, "mcpServers"), name, def)
      return
    }
    const agentServers = this.#agentServers(scope.agentId)
    if (agentServers !== undefined && Object.hasOwn(agentServers, name)) {
      setOwn(agentServers, name, def)
      return
    }
    const storeServers = this.#storeServers()
    const byAgentKey = `${name}${BY_AGENT}${scope.agentId}`
    if (storeServers !== undefined && Object.hasOwn(storeServers, byAgentKey)) {
      setOwn(storeServers, byAgentKey, def)
      return
    }
    const agent = this.#child(this.#child(this.doc, "agents"), scope.agentId)
    setOwn(this.#child(agent, "mcpServers"), name, def)
  }

  removeService(scope: Scope, name: string): boolean {
    this.#guard()
    const storeServers = this.#storeServers()
    if (scope.kind === "store") {
      if (storeServers === undefined || splitByAgentKey(name) !== undefined || !Object.hasOwn(storeServers, name)) {
        return false
      }
      delete storeServers[name]
      return true
    }
    let removed = false
    const agentServers = this.#agentServers(scope.agentId)
    if (agentServers !== undefined && Object.hasOwn(agentServers, name)) {
      delete agentServers[name]
      removed = true
      this.#prune(scope.agentId)
    }
    const byAgentKey = `${name}${BY_AGENT}${scope.agentId}`
    if (storeServers !== undefined && Object.hasOwn(storeServers, byAgentKey)) {
      delete storeServers[byAgentKey]
      removed = true
    }
    return removed
  }

  removeAgent(agentId: string): boolean {
    this.#guard()
    let removed = false
    const agents = own(this.doc, "agents")
    if (isObject(agents) && Object.hasOwn(agents, agentId)) {
      const servers = own(own(agents, agentId), "mcpServers")
      removed = isObject(servers) && Object.keys(servers).length > 0
      delete agents[agentId]
      if (Object.keys(agents).length === 0) delete this.doc["agents"]
    }
    const storeServers = this.#storeServers()
    if (storeServers !== undefined) {
      for (const key of Object.keys(storeServers)) {
        if (splitByAgentKey(key)?.agentId === agentId) {
          delete storeServers[key]
          removed = true
        }
      }
    }
    return removed
  }

  clearStore(): number {
    this.#guard()
    const storeServers = this.#storeServers()
    if (storeServers === undefined) return 0
    let count = 0
    for (const key of Object.keys(storeServers)) {
      if (splitByAgentKey(key) === undefined) {
        delete storeServers[key]
        count++
      }
    }
    return count
  }

  clearAll(): void {
    this.#guard()
    setOwn(this.doc, "mcpServers", dict())
    delete this.doc["agents"]
  }

  replaceDocument(document: unknown): void {
    this.#guard()
    const problem = shapeProblem(document)
    if (problem !== undefined) throw new ServicesFileError(this.path, `not a services file: ${problem}`)
    this.doc = nullPrototypeJson(document) as JsonObject
  }

  view(): ServicesConfig {
    this.#guard()
    return configOf(this.doc)
  }
}
