/**
 * The services file's document (docs/services-file.md), in the formats MCP clients
 * already write: `mcpServers` (Claude Desktop, Cursor, Cline, Windsurf's `serverUrl`, Gemini CLI's
 * `httpUrl`, the Python MCPStore's `<name>_byagent_<agent>` keys), VS Code's `servers` (with
 * `type`), an `agents` section, and JSON with comments and trailing commas (JSONC). Parsing and
 * shape checks of a file's text, the definitions it holds with the problems of each entry that
 * cannot be used, and the draft that `ServicesFile.update` changes.
 *
 * The file is someone's document: unknown fields, the keys services were read from and the
 * entry's own spelling (`serverUrl`, `httpUrl`, `servers` with `type`, `_byagent_` keys) are kept
 * when a change is written back. Its objects, and the records of definitions read from it, have a
 * null prototype (src/domain/dict.ts): a service "constructor" or an agent "__proto__" is a key
 * like any other. No I/O here: src/config/services-file.ts reads and writes.
 */
import { Either, ParseResult, Schema } from "effect"
import { applyEdits, modify, visit, type ParseErrorCode } from "jsonc-parser"
import { dict, nullPrototypeJson, parseJsonDict } from "../domain/dict.js"
import { agentIdProblem, normaliseTransport, serviceNameProblem, SERVICE_NAME_PATTERN } from "../domain/schemas.js"
import { canonicalJson, DefinitionError, resolveDefinition, type Scope, type ServiceDefinition } from "../domain/service-definition.js"

/** Every service definition of the file, by scope. Frozen: a snapshot, not a handle. */
export interface ServicesConfig {
  readonly store: Readonly<Record<string, ServiceDefinition>>
  readonly agents: Readonly<Record<string, Readonly<Record<string, ServiceDefinition>>>>
}

/**
 * An entry of the file that cannot be used as it is, and what was done with it:
 * - `unreachable`: loaded under its name, it cannot connect (its status says `unreachable` and its
 *   `last_error` the problem);
 * - `left out`: not loaded (no usable name, an agent id that is not one, not an object, a name
 *   given twice); on a reload a running service of that name is kept as it was;
 * - `note`: loaded, with a caveat (a `${...}` variable that mcp-store does not expand: VS Code's
 *   inputs and workspace variables).
 */
export interface EntryProblem {
  /** Where the entry is in the document: `mcpServers.weather`, `agents.a1.servers.files`. */
  readonly at: string
  /** The service's scope (`store` or the agent id) and name, when the entry names one. */
  readonly service: { readonly scope: Scope; readonly name: string } | undefined
  readonly problem: string
  readonly outcome: "unreachable" | "left out" | "note"
}

/** One line for a log: where, what, and what was done. */
export const describeProblem = (p: EntryProblem): string =>
  `${p.at}: ${p.problem}${p.outcome === "unreachable" ? " (loaded as unreachable)" : p.outcome === "left out" ? " (not loaded)" : ""}`

/** The definitions of a document and the problems of its entries. */
export interface DocumentReading {
  readonly config: ServicesConfig
  readonly problems: ReadonlyArray<EntryProblem>
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
  /** The definition of `name` in `scope` (in the runtime's spelling: `url`, `transport`), or undefined. */
  getService(scope: Scope, name: string): ServiceDefinition | undefined
  /**
   * Adds or replaces a definition, written in the file's own layout: a service goes back where it
   * was read from, in that entry's spelling (`serverUrl`, `httpUrl`, VS Code's `type`); a new
   * store service goes to `mcpServers` (or `servers` in a VS Code file); a new agent service to
   * `agents.<agent>.mcpServers`, or to a `<name>_byagent_<agent>` key in a file that uses them.
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

/** The keys of a section of service definitions: `mcpServers` (most clients) and `servers` (VS Code). */
const SECTIONS = ["mcpServers", "servers"] as const
type Section = (typeof SECTIONS)[number]

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

/** A section of service definitions: an object; each entry is judged on its own (`readDocument`). */
const Definitions = objectOf(Schema.Unknown, "must be an object of service definitions")

const sectionFields = {
  mcpServers: Schema.optionalWith(Definitions, { exact: true }),
  servers: Schema.optionalWith(Definitions, { exact: true })
}

/**
 * The document's shape: `mcpServers` and/or `servers`, and `agents` each with its own; any other
 * field is kept as it is. An entry that is not usable (a hand edit half done, a field of the wrong
 * type) does not make the file unreadable: that entry alone is refused (`readDocument`).
 */
const ServicesDocument = Schema.Struct(
  {
    ...sectionFields,
    agents: Schema.optionalWith(
      objectOf(
        Schema.Struct(sectionFields, Schema.Record({ key: Schema.String, value: Schema.Unknown })).annotations({
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

// ---------------------------------------------------------------------------------------------
// Text: JSON, or JSON with comments and trailing commas
// ---------------------------------------------------------------------------------------------

const lineAndColumn = (text: string, offset: number): string => {
  const before = text.slice(0, offset)
  const line = before.split("\n").length
  const column = before.length - before.lastIndexOf("\n")
  return `line ${line}, column ${column}`
}

/** jsonc-parser's error codes in words (ParseErrorCode is a const enum: its numbers). */
const JSONC_ERRORS: Readonly<Record<number, string>> = {
  1: "invalid symbol",
  2: "invalid number",
  3: "a property name is expected",
  4: "a value is expected",
  5: "a colon is expected",
  6: "a comma is expected",
  7: "a closing brace is expected",
  8: "a closing bracket is expected",
  9: "the end of the file is expected",
  10: "invalid comment",
  11: "a comment is not closed",
  12: "a string is not closed",
  13: "a number is not finished",
  14: "invalid unicode escape",
  15: "invalid escape character",
  16: "invalid character in a string"
}

/**
 * Parses JSON with comments and trailing commas into null-prototype objects (jsonc-parser's own
 * `parse` assigns keys on plain objects, where `__proto__` would set the prototype). Throws the
 * first syntax error with its line and column.
 */
const parseJsonc = (text: string, strict = false): unknown => {
  const stack: Array<{ readonly container: JsonObject | unknown[]; key: string | undefined }> = []
  let root: unknown
  let error: { readonly code: ParseErrorCode; readonly offset: number } | undefined
  const add = (value: unknown): void => {
    const top = stack.at(-1)
    if (top === undefined) root = value
    else if (Array.isArray(top.container)) top.container.push(value)
    else if (top.key !== undefined) setOwn(top.container, top.key, value)
  }
  visit(
    text,
    {
      onObjectBegin: () => {
        const obj = dict<unknown>()
        add(obj)
        stack.push({ container: obj, key: undefined })
      },
      onObjectProperty: (property) => {
        const top = stack.at(-1)
        if (top !== undefined) top.key = property
      },
      onObjectEnd: () => void stack.pop(),
      onArrayBegin: () => {
        const arr: unknown[] = []
        add(arr)
        stack.push({ container: arr, key: undefined })
      },
      onArrayEnd: () => void stack.pop(),
      onLiteralValue: (value: unknown) => add(value),
      onError: (code, offset) => {
        error ??= { code, offset }
      }
    },
    { allowTrailingComma: !strict, disallowComments: strict, allowEmptyContent: false }
  )
  if (error !== undefined) {
    throw new SyntaxError(`${JSONC_ERRORS[error.code] ?? "invalid JSON"} (${lineAndColumn(text, error.offset)})`)
  }
  return root
}

/** A document read from a file's text. `jsonc`: the text has comments or trailing commas (see `renderText`). */
export interface ParsedDocument {
  readonly doc: JsonObject
  readonly jsonc: boolean
}

/**
 * Parses and checks the file's content: JSON, or JSON with comments and trailing commas; throws
 * `ServicesFileError` naming the path and the problem (with line and column for a syntax error).
 */
export const parseText = (path: string, text: string): ParsedDocument => {
  const body = text.replace(/^\uFEFF/, "")
  let doc: unknown
  let jsonc = false
  try {
    doc = parseJsonDict(body)
  } catch {
    try {
      doc = parseJsonc(body)
      jsonc = true
    } catch (e2) {
      // The JSONC parser's message: a reason and a position. JSON.parse's quotes the text around the
      // error, which may be a secret of the file.
      throw new ServicesFileError(path, `not valid JSON: ${(e2 as Error).message}`)
    }
  }
  const problem = shapeProblem(doc)
  if (problem !== undefined) throw new ServicesFileError(path, `not a services file: ${problem}`)
  return { doc: doc as JsonObject, jsonc }
}

/**
 * Why `text` is not JSON (strict: no comments or trailing commas): a reason and its line and
 * column, never the text itself (JSON.parse's message quotes it). For a text JSON.parse refused.
 */
export const jsonSyntaxProblem = (text: string): string => {
  try {
    parseJsonc(text, true)
  } catch (e) {
    return (e as Error).message
  }
  return "invalid JSON"
}

/** `parseText`'s document alone. */
export const parseDocument = (path: string, text: string): JsonObject => parseText(path, text).doc

/**
 * How `editText` edits: two-space indentation for what it writes. A new entry of a section goes
 * first in it (inserted after the brace: a comment at the end of the previous last entry's line
 * stays with that entry); a new top-level field goes last.
 */
const editFormat = (path: ReadonlyArray<string>) =>
  ({
    formattingOptions: { insertSpaces: true, tabSize: 2, eol: "\n" },
    getInsertionIndex: (properties: string[]) => (path.length <= 1 ? properties.length : 0)
  }) as const

/**
 * The text of `next` written over `previousText` (the text `previous` was read from) with the
 * fewest edits: the comments, formatting and key order of the parts not changed are kept. Objects
 * are compared key by key; any other changed value is replaced whole. When the edited text does
 * not read back as `next` (it always should), the document is written plain (`serialize`).
 */
export const editText = (previousText: string, previous: JsonObject, next: JsonObject): string => {
  let text = previousText
  const pending: Array<{ readonly path: ReadonlyArray<string>; readonly a: unknown; readonly b: unknown }> = [{ path: [], a: previous, b: next }]
  for (let item = pending.shift(); item !== undefined; item = pending.shift()) {
    const { path, a, b } = item
    if (isObject(a) && isObject(b)) {
      for (const key of Object.keys(a)) {
        if (!Object.hasOwn(b, key)) text = applyEdits(text, modify(text, [...path, key], undefined, editFormat([...path, key])))
      }
      for (const [key, value] of Object.entries(b)) {
        if (!Object.hasOwn(a, key)) text = applyEdits(text, modify(text, [...path, key], value, editFormat([...path, key])))
        else if (canonicalJson(a[key]) !== canonicalJson(value)) pending.push({ path: [...path, key], a: a[key], b: value })
      }
    } else if (path.length > 0) {
      text = applyEdits(text, modify(text, [...path], b, editFormat(path)))
    } else {
      return serialize(next)
    }
  }
  try {
    if (canonicalJson(parseJsonc(text.replace(/^\uFEFF/, ""))) === canonicalJson(next)) return text.endsWith("\n") ? text : `${text}\n`
  } catch {
    // fall through: written plain
  }
  return serialize(next)
}

// ---------------------------------------------------------------------------------------------
// Entries: each client's spelling, read into the runtime's and written back in the entry's own
// ---------------------------------------------------------------------------------------------

/**
 * An entry in the runtime's spelling: Windsurf's `serverUrl` and Gemini CLI's `httpUrl` (Streamable
 * HTTP) become `url` (with `transport` for `httpUrl`); every other field is kept as it is (VS Code's
 * and Cline's `type` is a synonym of `transport` already).
 */
const readEntry = (entry: JsonObject): ServiceDefinition => {
  const def = nullPrototypeJson(entry) as JsonObject
  if (!Object.hasOwn(def, "url")) {
    if (typeof own(def, "serverUrl") === "string") {
      return renameKey(def, "serverUrl", "url") as ServiceDefinition
    }
    if (typeof own(def, "httpUrl") === "string") {
      const out = renameKey(def, "httpUrl", "url")
      if (!Object.hasOwn(out, "transport") && !Object.hasOwn(out, "type")) setOwn(out, "transport", "streamable_http")
      return out as ServiceDefinition
    }
  }
  return def as ServiceDefinition
}

/** A copy of `obj` with `from` renamed `to`, in the same place among the keys. */
const renameKey = (obj: JsonObject, from: string, to: string): JsonObject =>
  dict(Object.entries(obj).filter(([k]) => k !== to || from === to).map(([k, v]): [string, unknown] => [k === from ? to : k, v]))

/** VS Code's `type` for a definition: stdio, http or sse. */
const vscodeType = (def: JsonObject): string => {
  const given = own(def, "transport") ?? own(def, "type")
  const transport = typeof given === "string" ? normaliseTransport(given) : undefined
  if (transport === "stdio" || (transport === undefined && own(def, "command") !== undefined)) return "stdio"
  if (transport === "sse") return "sse"
  if (transport === "streamable_http") return "http"
  try {
    return resolveDefinition(def as ServiceDefinition).transport === "sse" ? "sse" : "http"
  } catch {
    return "http"
  }
}

/**
 * A definition in the spelling of the entry it replaces (`previous`, if any) and of its section:
 * an entry read from `serverUrl` or `httpUrl` keeps that key; an entry of VS Code's `servers`
 * says its `type` (stdio, http, sse) instead of `transport`.
 */
const writeEntry = (definition: ServiceDefinition, previous: unknown, section: Section): JsonObject => {
  let out = nullPrototypeJson(definition) as JsonObject
  const url = own(out, "url")
  if (typeof url === "string" && isObject(previous) && !Object.hasOwn(previous, "url")) {
    if (Object.hasOwn(previous, "serverUrl")) {
      out = renameKey(out, "url", "serverUrl")
    } else if (Object.hasOwn(previous, "httpUrl")) {
      const given = own(out, "transport") ?? own(out, "type")
      const transport = typeof given === "string" ? normaliseTransport(given) : "streamable_http"
      if (transport === "streamable_http") {
        out = renameKey(out, "url", "httpUrl")
        if (!Object.hasOwn(previous, "transport")) delete out["transport"]
      }
    }
  }
  if (section === "servers" && !Object.hasOwn(out, "type")) {
    const type = vscodeType(out)
    const entries = Object.entries(out).filter(([k]) => k !== "transport")
    out = dict([["type", type] as [string, unknown], ...entries])
  } else if (section === "servers" && Object.hasOwn(out, "transport")) {
    delete out["transport"]
  }
  return out
}

// ---------------------------------------------------------------------------------------------
// Reading a document: its definitions and the problems of its entries
// ---------------------------------------------------------------------------------------------

/**
 * A name that follows the name rule, made from one that does not (`Brave Search` -> `Brave-Search`):
 * what `mcp-store import` registers such an entry as, and what the log suggests.
 */
export const suggestName = (name: string): string => {
  const cleaned = name
    .replace(/_byagent_/g, "-byagent-")
    .replace(/[^A-Za-z0-9_.-]+/g, "-")
    .replace(/_{2,}/g, "_")
    .replace(/^[^A-Za-z0-9]+/, "")
    .slice(0, 64)
    .replace(/[-_.]+$/, "")
  return cleaned === "" ? "service" : cleaned
}

const quote = (s: string): string => JSON.stringify(s)

/** Why a name cannot be a service name, in words, with a name that would do. */
const nameProblem = (name: string): string | undefined => {
  // The rule's pattern first: a usable name (nearly all of them) is not decoded by the schema.
  if (SERVICE_NAME_PATTERN.test(name) && !name.includes("__") && !name.includes(BY_AGENT)) return undefined
  const problem = serviceNameProblem(name)
  if (problem === undefined) return undefined
  const rule = SERVICE_NAME_PATTERN.test(name) ? problem : `may hold only letters, digits, '_', '.' and '-' (at most 64, starting with a letter or digit)`
  return `service name ${quote(name)} ${rule}: rename it, e.g. ${quote(suggestName(name))}`
}

/** Every string of a value (nested), to look for `${...}` variables. */
const strings = (value: unknown, out: string[] = []): string[] => {
  if (typeof value === "string") out.push(value)
  else if (Array.isArray(value)) for (const v of value) strings(v, out)
  else if (isObject(value)) for (const v of Object.values(value)) strings(v, out)
  return out
}

/**
 * The caveats of a usable entry: variables mcp-store does not expand (it expands `${VAR}`,
 * `${VAR:-default}` and `${env:VAR}` when the service connects, src/domain/references.ts; VS Code's
 * `${input:...}` and `${workspaceFolder}` are not).
 */
const notes = (def: JsonObject): string[] => {
  const out: string[] = []
  const fields = ["command", "args", "env", "url", "headers", "cwd", "envFile"].map((k) => own(def, k))
  const variable = strings(fields)
    .flatMap((s) => [...s.matchAll(/\$\{[^}]{1,100}\}/g)].map((m) => m[0]))
    .find((v) => !/^\$\{(?:env:)?[A-Za-z_][A-Za-z0-9_]*(?::-[^}]*)?\}$/.test(v))
  if (variable !== undefined) out.push(`holds ${variable}: mcp-store expands only \${VAR}, \${VAR:-default} and \${env:VAR} (not VS Code inputs or workspace variables); write the value itself`)
  return out
}

/**
 * What `judge` found for each definition text: a document is read again after every change, and a
 * large one holds thousands of definitions that the schema would check afresh each time (about
 * 0.1 ms each). Bounded: emptied when it grows past `JUDGED_MAX` entries.
 */
const judged = new Map<string, string | null>()
const JUDGED_MAX = 50_000

/** `definitionProblem`, remembered by the definition's text (`judged`). */
const judge = (def: ServiceDefinition): string | undefined => {
  const key = JSON.stringify(def)
  const known = judged.get(key)
  if (known !== undefined) return known ?? undefined
  const problem = definitionProblem(def)
  if (judged.size >= JUDGED_MAX) judged.clear()
  judged.set(key, problem ?? null)
  return problem
}

/** Why a definition is not usable, in the domain's words (`"args" must be an array of strings`), or undefined. */
const definitionProblem = (def: ServiceDefinition): string | undefined => {
  try {
    resolveDefinition(def)
    return undefined
  } catch (e) {
    if (!(e instanceof DefinitionError)) return e instanceof Error ? e.message : String(e)
    const url = own(def, "url")
    const scheme = typeof url === "string" && URL.canParse(url) ? new URL(url).protocol.slice(0, -1) : undefined
    return e.problems
      .map((p) => {
        if (p.field === "url" && scheme !== undefined && scheme !== "http" && scheme !== "https") return `unsupported URL scheme ${scheme}: use http or https`
        if (p.field === "body" || /^exactly one|^a '|^stdio/.test(p.problem)) return p.problem
        return /^(must|is|may|should|cannot|only)\b/.test(p.problem) ? `${quote(p.field)} ${p.problem}` : `${quote(p.field)}: ${p.problem}`
      })
      .join("; ")
  }
}

const scopeAt = (scope: Scope, section: Section, key: string): string =>
  scope.kind === "store" ? `${section}.${quote(key)}` : `agents.${quote(scope.agentId)}.${section}.${quote(key)}`

/**
 * The definitions of a document and the problems of its entries. Each entry is judged on its own:
 * one that names a service is loaded even when it cannot connect (its problem becomes its
 * `last_error`); one without a usable name or agent id, or that is not an object, is left out.
 * Services are read from `agents.<id>.mcpServers`/`servers` first, then the store's
 * `mcpServers`/`servers` (where `<name>_byagent_<agent>` keys are agent services): a service given
 * twice keeps its first definition.
 */
export const readDocument = (doc: JsonObject): DocumentReading => {
  const store = new Map<string, ServiceDefinition>()
  const agents = new Map<string, Map<string, ServiceDefinition>>()
  const problems: EntryProblem[] = []
  const badAgents = new Set<string>()
  const take = (scope: Scope, name: string, entry: unknown, at: string): void => {
    if (scope.kind === "agent") {
      const idProblem = agentIdProblem(scope.agentId)
      if (idProblem !== undefined) {
        if (!badAgents.has(scope.agentId)) problems.push({ at, service: undefined, problem: `agent id ${quote(scope.agentId)} ${idProblem}`, outcome: "left out" })
        badAgents.add(scope.agentId)
        return
      }
    }
    const badName = nameProblem(name)
    if (badName !== undefined) {
      problems.push({ at, service: undefined, problem: badName, outcome: "left out" })
      return
    }
    const service = { scope, name }
    if (!isObject(entry)) {
      problems.push({ at, service, problem: "must be an object (a service definition)", outcome: "left out" })
      return
    }
    let target = store
    if (scope.kind === "agent") {
      target = agents.get(scope.agentId) ?? new Map()
      agents.set(scope.agentId, target)
    }
    if (target.has(name)) {
      problems.push({ at, service, problem: `${quote(name)} is defined twice: the first definition is used`, outcome: "left out" })
      return
    }
    const def = readEntry(entry)
    target.set(name, def)
    const problem = judge(def)
    if (problem !== undefined) problems.push({ at, service, problem, outcome: "unreachable" })
    else for (const note of notes(def)) problems.push({ at, service, problem: note, outcome: "note" })
  }
  const agentsSection = own(doc, "agents")
  if (isObject(agentsSection)) {
    for (const [agentId, agent] of Object.entries(agentsSection)) {
      for (const section of SECTIONS) {
        const servers = own(agent, section)
        if (!isObject(servers)) continue
        for (const [name, entry] of Object.entries(servers)) take({ kind: "agent", agentId }, name, entry, scopeAt({ kind: "agent", agentId }, section, name))
      }
    }
  }
  for (const section of SECTIONS) {
    const servers = own(doc, section)
    if (!isObject(servers)) continue
    for (const [key, entry] of Object.entries(servers)) {
      const byAgent = splitByAgentKey(key)
      const at = scopeAt({ kind: "store" }, section, key)
      if (byAgent === undefined) take({ kind: "store" }, key, entry, at)
      else take({ kind: "agent", agentId: byAgent.agentId }, byAgent.name, entry, at)
    }
  }
  const copy = (m: Map<string, ServiceDefinition>) => dict([...m])
  const config = deepFreeze({ store: copy(store), agents: dict([...agents].filter(([, m]) => m.size > 0).map(([id, m]) => [id, copy(m)])) })
  return { config, problems: Object.freeze(problems) }
}

/** The definitions of a document (`readDocument` without the problems). */
export const configOf = (doc: JsonObject): ServicesConfig => readDocument(doc).config

/** Names and agent ids written to the file follow the domain's rules (`ServiceName`, `AgentId`). */
const checkScopeAndName = (scope: Scope, name: string): void => {
  const problem = serviceNameProblem(name)
  if (problem !== undefined) throw new RangeError(`service name "${name}" ${problem}`)
  if (scope.kind === "agent") {
    const idProblem = agentIdProblem(scope.agentId)
    if (idProblem !== undefined) throw new RangeError(`agent id "${scope.agentId}" ${idProblem}`)
  }
}

/** Where a service's entry is: the object holding it, its key there, and the kind of section. */
interface Place {
  readonly container: JsonObject
  readonly key: string
  readonly section: Section
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

  /** The store's sections present in the document. */
  #storeSections(): Array<{ readonly section: Section; readonly servers: JsonObject }> {
    return SECTIONS.flatMap((section) => {
      const servers = own(this.doc, section)
      return isObject(servers) ? [{ section, servers }] : []
    })
  }

  /**
   * The section new entries of `holder` (the document or an agent) go to: the one it has
   * (`mcpServers` first), else the document's; a document with neither gets `mcpServers`.
   */
  #sectionOf(holder: JsonObject): Section {
    if (isObject(own(holder, "mcpServers"))) return "mcpServers"
    if (isObject(own(holder, "servers"))) return "servers"
    return holder === this.doc ? "mcpServers" : this.#sectionOf(this.doc)
  }

  /** A file of the Python MCPStore: agent services as `_byagent_` keys, no `agents` section. */
  #usesByAgentKeys(): boolean {
    if (own(this.doc, "agents") !== undefined) return false
    return this.#storeSections().some(({ servers }) => Object.keys(servers).some((k) => splitByAgentKey(k) !== undefined))
  }

  /** Every place the service's entry is found, first the one it is read from. */
  #places(scope: Scope, name: string): Place[] {
    const out: Place[] = []
    if (scope.kind === "agent") {
      const agent = own(own(this.doc, "agents"), scope.agentId)
      for (const section of SECTIONS) {
        const servers = own(agent, section)
        if (isObject(servers) && Object.hasOwn(servers, name)) out.push({ container: servers, key: name, section })
      }
    }
    const key = scope.kind === "store" ? name : `${name}${BY_AGENT}${scope.agentId}`
    if (scope.kind === "store" && splitByAgentKey(name) !== undefined) return out
    for (const { section, servers } of this.#storeSections()) {
      if (Object.hasOwn(servers, key)) out.push({ container: servers, key, section })
    }
    return out
  }

  /** Drops an agent left without services (and `agents` left without agents), unless they hold other fields. */
  #prune(agentId: string): void {
    const agents = own(this.doc, "agents")
    if (!isObject(agents)) return
    const agent = own(agents, agentId)
    if (isObject(agent)) {
      const onlySections = Object.keys(agent).every((k) => (SECTIONS as ReadonlyArray<string>).includes(k))
      const empty = SECTIONS.every((s) => {
        const servers = own(agent, s)
        return servers === undefined || (isObject(servers) && Object.keys(servers).length === 0)
      })
      if (onlySections && empty) delete agents[agentId]
    }
    if (Object.keys(agents).length === 0) delete this.doc["agents"]
  }

  getService(scope: Scope, name: string): ServiceDefinition | undefined {
    this.#guard()
    const place = this.#places(scope, name)[0]
    const entry = place === undefined ? undefined : own(place.container, place.key)
    return isObject(entry) ? readEntry(entry) : undefined
  }

  setService(scope: Scope, name: string, definition: ServiceDefinition): void {
    this.#guard()
    checkScopeAndName(scope, name)
    if (!isObject(definition)) throw new RangeError(`the definition of "${name}" must be an object`)
    const place = this.#places(scope, name)[0]
    if (place !== undefined) {
      setOwn(place.container, place.key, writeEntry(definition, own(place.container, place.key), place.section))
      return
    }
    if (scope.kind === "store") {
      const section = this.#sectionOf(this.doc)
      setOwn(this.#child(this.doc, section), name, writeEntry(definition, undefined, section))
      return
    }
    if (this.#usesByAgentKeys()) {
      const section = this.#sectionOf(this.doc)
      setOwn(this.#child(this.doc, section), `${name}${BY_AGENT}${scope.agentId}`, writeEntry(definition, undefined, section))
      return
    }
    const agent = this.#child(this.#child(this.doc, "agents"), scope.agentId)
    const section = this.#sectionOf(agent)
    setOwn(this.#child(agent, section), name, writeEntry(definition, undefined, section))
  }

  removeService(scope: Scope, name: string): boolean {
    this.#guard()
    const places = this.#places(scope, name)
    for (const { container, key } of places) delete container[key]
    if (scope.kind === "agent" && places.length > 0) this.#prune(scope.agentId)
    return places.length > 0
  }

  removeAgent(agentId: string): boolean {
    this.#guard()
    let removed = false
    const agents = own(this.doc, "agents")
    if (isObject(agents) && Object.hasOwn(agents, agentId)) {
      const agent = own(agents, agentId)
      removed = SECTIONS.some((s) => {
        const servers = own(agent, s)
        return isObject(servers) && Object.keys(servers).length > 0
      })
      delete agents[agentId]
      if (Object.keys(agents).length === 0) delete this.doc["agents"]
    }
    for (const { servers } of this.#storeSections()) {
      for (const key of Object.keys(servers)) {
        if (splitByAgentKey(key)?.agentId === agentId) {
          delete servers[key]
          removed = true
        }
      }
    }
    return removed
  }

  clearStore(): number {
    this.#guard()
    let count = 0
    for (const { servers } of this.#storeSections()) {
      for (const key of Object.keys(servers)) {
        if (splitByAgentKey(key) === undefined) {
          delete servers[key]
          count++
        }
      }
    }
    return count
  }

  clearAll(): void {
    this.#guard()
    const sections = this.#storeSections()
    if (sections.length === 0) setOwn(this.doc, "mcpServers", dict())
    for (const { section } of sections) setOwn(this.doc, section, dict())
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
