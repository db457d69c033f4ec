/**
 * `mcp-store import <file>`: merges another MCP client's config file (Claude Desktop, Cursor, Cline,
 * Windsurf, Gemini CLI, VS Code, the Python MCPStore, another mcp-store) into the services file,
 * and says what it took and what it skipped, and why. The services file is changed like any other
 * change (`ServicesFile.update`: one atomic write, its layout and comments kept), so a server
 * running with `--reload` on that file picks the new services up at once.
 *
 * A name clash is skipped unless `--overwrite`; an entry with the same definition is already
 * there; a name outside the name rule (`Brave Search`) is taken under a name that follows it
 * (`Brave-Search`); an entry that cannot be used (`"args": 5`, an `ftp://` URL) is skipped with
 * its problem. `--dry-run` prints the same report and writes nothing.
 */
import { readFile } from "node:fs/promises"
import { resolve as resolvePath } from "node:path"
import { Command, Option } from "commander"
import { dict, nullPrototypeJson } from "../domain/dict.js"
import { sameDefinition, scopeLabel, type Scope, type ServiceDefinition } from "../domain/service-definition.js"
import { serviceNameProblem } from "../domain/schemas.js"
import { errnoCode } from "../config/atomic-write.js"
import { FileLockTimeout } from "../config/file-lock.js"
import {
  describeProblem,
  DocumentDraft,
  parseText,
  readDocument,
  ServicesFileError,
  suggestName,
  type JsonObject,
  type ServicesDraft
} from "../config/services-document.js"
import { ServicesFile } from "../config/services-file.js"
import { parseArguments, servicesFileOf, UsageError } from "./subcommand.js"

/** What `importServices` does. */
export interface ImportOptions {
  /** The other client's file. */
  readonly source: string
  /** The services file to merge into (created when missing, unless `dryRun`). */
  readonly target: string
  /** Replace a service of the same name (default: skip it). */
  readonly overwrite?: boolean
  /** Report only; write nothing. */
  readonly dryRun?: boolean
}

/** One entry of the other file and what was done with it. */
export interface ImportEntry {
  /** `store` or the agent id. */
  readonly scope: string
  /** The name in the other file. */
  readonly from: string
  /** The name it is registered under (differs when renamed to follow the name rule). */
  readonly name: string
  readonly outcome: "added" | "replaced" | "unchanged" | "skipped"
  /** Why it was skipped, renamed, or what to know about it. */
  readonly notes: ReadonlyArray<string>
}

/** What `importServices` did (or would do, for a dry run). */
export interface ImportReport {
  readonly source: string
  readonly target: string
  readonly dryRun: boolean
  readonly entries: ReadonlyArray<ImportEntry>
  /** Entries of the other file left out before any name could be given (an agent id that is not one). */
  readonly unusable: ReadonlyArray<string>
}

const SECTIONS = ["mcpServers", "servers"] as const

const isObject = (v: unknown): v is JsonObject => typeof v === "object" && v !== null && !Array.isArray(v)

/** The key of a rename: a scope's label and the name given (a name is renamed in its own scope only). */
const renameKey = (scope: string, name: string): string => `${scope}/${name}`

/**
 * The other file's document, its names made to follow the name rule (`renames`: `renameKey` of the
 * scope and the new name -> old name). A new name is one no entry of the scope has in any section:
 * an entry whose name was valid keeps it. VS Code's user settings keep their servers under
 * `mcp.servers`: read from there when the document has no section of its own.
 */
const normalisedSource = (doc: JsonObject): { readonly doc: JsonObject; readonly renames: Map<string, string> } => {
  const out = nullPrototypeJson(doc) as JsonObject
  const nested = out["mcp"]
  if (!SECTIONS.some((s) => isObject(out[s])) && isObject(nested) && isObject(nested["servers"])) out["servers"] = nested["servers"]
  const renames = new Map<string, string>()
  const valid = (key: string) => key.includes("_byagent_") || serviceNameProblem(key) === undefined
  /** The names of a scope's sections that are kept as they are: no new name may be one of them. */
  const keptNames = (holder: JsonObject): Set<string> =>
    new Set(SECTIONS.flatMap((s) => (isObject(holder[s]) ? Object.keys(holder[s]).filter(valid) : [])))
  const fix = (servers: JsonObject, scope: string, taken: Set<string>): JsonObject =>
    dict(
      Object.entries(servers).map(([key, entry]): [string, unknown] => {
        if (valid(key)) return [key, entry]
        let name = suggestName(key)
        for (let n = 2; taken.has(name); n++) name = `${suggestName(key).slice(0, 60)}-${n}`
        taken.add(name)
        renames.set(renameKey(scope, name), key)
        return [name, entry]
      })
    )
  const taken = keptNames(out)
  for (const s of SECTIONS) if (isObject(out[s])) out[s] = fix(out[s], "store", taken)
  const agents = out["agents"]
  if (isObject(agents)) {
    for (const [agentId, agent] of Object.entries(agents)) {
      if (!isObject(agent)) continue
      const agentTaken = keptNames(agent)
      // `<name>_byagent_<agent>` keys of the store's sections are this agent's services too.
      for (const s of SECTIONS) {
        for (const key of isObject(out[s]) ? Object.keys(out[s]) : []) {
          const at = key.indexOf("_byagent_")
          if (at > 0 && key.slice(at + "_byagent_".length) === agentId) agentTaken.add(key.slice(0, at))
        }
      }
      for (const s of SECTIONS) if (isObject(agent[s])) agent[s] = fix(agent[s], agentId, agentTaken)
    }
  }
  return { doc: out, renames }
}

/** Merges the services of `doc` into `draft`; returns what was done with each entry. */
const merge = (
  draft: ServicesDraft,
  doc: JsonObject,
  renames: ReadonlyMap<string, string>,
  overwrite: boolean
): { readonly entries: ImportEntry[]; readonly unusable: string[] } => {
  const { config, problems } = readDocument(doc)
  const entries: ImportEntry[] = []
  const unusable: string[] = []
  const problemsOf = (scope: Scope, name: string) =>
    problems.filter((p) => p.service !== undefined && scopeLabel(p.service.scope) === scopeLabel(scope) && p.service.name === name)
  for (const p of problems) if (p.service === undefined) unusable.push(describeProblem(p))
  const take = (scope: Scope, name: string, definition: ServiceDefinition) => {
    const from = renames.get(renameKey(scopeLabel(scope), name)) ?? name
    const notes: string[] = from === name ? [] : [`renamed from ${JSON.stringify(from)} (service names may hold only letters, digits, '_', '.' and '-')`]
    const own = problemsOf(scope, name)
    const refused = own.find((p) => p.outcome !== "note")
    const entry = (outcome: ImportEntry["outcome"], more: ReadonlyArray<string> = []) =>
      entries.push({ scope: scopeLabel(scope), from, name, outcome, notes: [...notes, ...more] })
    if (refused !== undefined) return entry("skipped", [refused.problem])
    const caveats = own.map((p) => p.problem)
    const existing = draft.getService(scope, name)
    if (existing !== undefined && sameDefinition(existing, definition) && existing.disabled === definition.disabled) return entry("unchanged", ["already there with the same definition"])
    if (existing !== undefined && !overwrite) return entry("skipped", ["a service of that name is already in the services file (--overwrite replaces it)"])
    draft.setService(scope, name, definition)
    entry(existing === undefined ? "added" : "replaced", caveats)
  }
  // Entries left out before they were read (not an object, given twice) are named too.
  for (const p of problems) {
    if (p.service === undefined || p.outcome !== "left out") continue
    entries.push({ scope: scopeLabel(p.service.scope), from: p.service.name, name: p.service.name, outcome: "skipped", notes: [p.problem] })
  }
  for (const [name, def] of Object.entries(config.store)) take({ kind: "store" }, name, def)
  for (const [agentId, services] of Object.entries(config.agents)) {
    for (const [name, def] of Object.entries(services)) take({ kind: "agent", agentId }, name, def)
  }
  // Reported in the order of the other file.
  const order = new Map<string, number>()
  const note = (key: string) => void (order.has(key) || order.set(key, order.size))
  for (const s of SECTIONS) if (isObject(doc[s])) for (const key of Object.keys(doc[s])) note(key.split("_byagent_")[0] ?? key)
  const agents = doc["agents"]
  if (isObject(agents)) for (const agent of Object.values(agents)) for (const s of SECTIONS) if (isObject(own(agent, s))) for (const key of Object.keys(own(agent, s) as JsonObject)) note(key)
  const rank = (e: ImportEntry) => order.get(e.name) ?? order.size
  return { entries: entries.sort((a, b) => rank(a) - rank(b)), unusable }
}

const own = (obj: unknown, key: string): unknown => (isObject(obj) && Object.hasOwn(obj, key) ? obj[key] : undefined)

/**
 * Merges the services of another client's config file into the services file (see the top of
 * this file). Rejects with `ServicesFileError` when either file cannot be read or parsed, or the
 * services file cannot be written; nothing is written then.
 */
export const importServices = async (options: ImportOptions): Promise<ImportReport> => {
  const source = resolvePath(options.source)
  const target = resolvePath(options.target)
  if (source === target) throw new ServicesFileError(source, "is the services file itself: nothing to import")
  let text: string
  try {
    text = await readFile(source, "utf8")
  } catch (e) {
    throw new ServicesFileError(source, `cannot be read (${(e as Error).message})`, { cause: e })
  }
  const { doc, renames } = normalisedSource(parseText(source, text).doc)
  const overwrite = options.overwrite === true
  if (options.dryRun === true) {
    let current: JsonObject = dict()
    let targetText: string | undefined
    try {
      targetText = await readFile(target, "utf8")
    } catch (e) {
      if (errnoCode(e) !== "ENOENT") throw new ServicesFileError(target, `cannot be read (${(e as Error).message})`, { cause: e })
    }
    if (targetText !== undefined) current = parseText(target, targetText).doc
    const draft = new DocumentDraft(current, target)
    const { entries, unusable } = merge(draft, doc, renames, overwrite)
    draft.close()
    return { source, target, dryRun: true, entries, unusable }
  }
  const file = await ServicesFile.open(target)
  const { entries, unusable } = await file.update((draft) => merge(draft, doc, renames, overwrite))
  return { source, target: file.path, dryRun: false, entries, unusable }
}

/** The report as lines for a person: one per entry, then a summary. */
export const formatImportReport = (report: ImportReport): string => {
  const label = (e: ImportEntry) => (e.scope === "store" ? e.name : `${e.scope}/${e.name}`)
  const verb: Record<ImportEntry["outcome"], string> = { added: "added   ", replaced: "replaced", unchanged: "same    ", skipped: "skipped " }
  const lines = report.entries.map((e) => `${verb[e.outcome]} ${label(e)}${e.notes.length > 0 ? `: ${e.notes.join("; ")}` : ""}`)
  for (const u of report.unusable) lines.push(`skipped  ${u}`)
  const count = (o: ImportEntry["outcome"]) => report.entries.filter((e) => e.outcome === o).length
  const taken = count("added") + count("replaced")
  const skipped = count("skipped") + report.unusable.length
  lines.push(
    `${report.dryRun ? "dry run: would take" : "took"} ${taken} service${taken === 1 ? "" : "s"} from ${report.source} into ${report.target}` +
      ` (${count("added")} added, ${count("replaced")} replaced, ${count("unchanged")} already there, ${skipped} skipped)` +
      (report.dryRun ? "; nothing written" : "")
  )
  if (!report.dryRun && taken > 0) {
    lines.push("A server running on this file with --reload applies the change now; without --reload, restart it to load the new services.")
  }
  return `${lines.join("\n")}\n`
}

/** Where `runImport` writes. */
export interface ImportIo {
  readonly cwd?: string
  readonly writeOut?: (text: string) => void
  readonly writeErr?: (text: string) => void
}

/**
 * `mcp-store import <file> [--config <services file>] [--overwrite] [--dry-run]`: runs the import
 * and prints its report. The services file is `--config`, else `MCPSTORE_CONFIG` or
 * `MCPSTORE_MCP_CONFIG_FILE`, else `./mcp.json`. Resolves with the exit code: 0 done, 1 a file
 * could not be read or written, 2 a usage error.
 */
export const runImport = async (argv: ReadonlyArray<string>, env: NodeJS.ProcessEnv, io: ImportIo = {}): Promise<number> => {
  const out = io.writeOut ?? ((text: string) => void process.stdout.write(text))
  const err = io.writeErr ?? ((text: string) => void process.stderr.write(text))
  const cwd = io.cwd ?? process.cwd()
  let given: { readonly file: string; readonly opts: Record<string, unknown> } | undefined
  const command = new Command("mcp-store import")
    .description("merge another MCP client's config file (Claude Desktop, Cursor, Cline, Windsurf, Gemini CLI, VS Code, MCPStore) into the services file")
    .argument("<file>", "the other client's config file (JSON, comments allowed)")
    .addOption(new Option("--config <file>", "the services file to merge into (default: MCPSTORE_CONFIG or ./mcp.json)"))
    .addOption(new Option("--overwrite", "replace a service of the same name (default: skip it)"))
    .addOption(new Option("--dry-run", "print what would be done; write nothing"))
    .exitOverride()
    .configureOutput({ writeOut: out, writeErr: err, outputError: () => undefined })
    .action((file: string, opts: Record<string, unknown>) => {
      given = { file, opts }
    })
  const parsed = await parseArguments(command, argv, err, "mcp-store import")
  if (parsed !== undefined) return parsed
  if (given === undefined) return 2
  let target: string
  try {
    target = servicesFileOf(given.opts["config"], env, cwd)
  } catch (e) {
    if (!(e instanceof UsageError)) throw e
    err(`mcp-store import: ${e.message}\n`)
    return 2
  }
  try {
    const report = await importServices({
      source: resolvePath(cwd, given.file),
      target,
      overwrite: given.opts["overwrite"] === true,
      dryRun: given.opts["dryRun"] === true
    })
    out(formatImportReport(report))
    return 0
  } catch (e) {
    if (e instanceof ServicesFileError || e instanceof FileLockTimeout) {
      err(`mcp-store import: ${e.message}\n`)
      return 1
    }
    throw e
  }
}
