/**
 * Tool allow-lists (README, Security): which tools a service offers (`include_tools` /
 * `exclude_tools` of its definition, the Gemini CLI's `includeTools` / `excludeTools` too, globs
 * over the service's own tool names) and which callable names an agent key may see and call (its
 * `tools` list, globs over `<service>__<tool>`). Free of I/O, used by the views (what is listed)
 * and the call path (what is refused with TOOL_NOT_ALLOWED).
 *
 * Globs are picomatch's. Each list is compiled once: a service's filter once per definition object
 * (definitions are never mutated; an edit is a new object), a key's gate once per `tools` array
 * (the keys file's entry, kept until the file changes), so the call path only tests regexes.
 */
import picomatch from "picomatch"

/** A glob's longest form and a list's largest size (bounded: a list is compiled and kept). */
export const MAX_GLOB_LENGTH = 200
export const MAX_GLOBS = 100

const OPTIONS: picomatch.PicomatchOptions = { dot: true }

/** Why a list of globs cannot be used, or undefined when it can (the field's problem in a 400). */
export const globsProblem = (value: unknown): string | undefined => {
  if (!Array.isArray(value)) return "must be an array of glob strings"
  if (value.length > MAX_GLOBS) return `must hold at most ${MAX_GLOBS} globs`
  for (const [i, g] of value.entries()) {
    if (typeof g !== "string" || g === "") return `[${i}] must be a non-empty string`
    if (g.length > MAX_GLOB_LENGTH) return `[${i}] must be at most ${MAX_GLOB_LENGTH} characters`
    // eslint-disable-next-line no-control-regex
    if (/[\u0000-\u001f\u007f]/.test(g)) return `[${i}] must not hold control characters`
    try {
      picomatch.makeRe(g, OPTIONS)
    } catch (e) {
      return `[${i}] is not a valid glob (${(e as Error).message})`
    }
  }
  return undefined
}

/** A compiled list: whether a name matches any of its globs. */
const compile = (globs: ReadonlyArray<string>): ((name: string) => boolean) => {
  if (globs.length === 0) return () => false
  const test = picomatch([...globs], OPTIONS)
  return (name) => test(name)
}

/** The fields of a definition this module reads (the canonical names, and the Gemini CLI's). */
export interface ToolFilterFields {
  readonly include_tools?: ReadonlyArray<string> | undefined
  readonly exclude_tools?: ReadonlyArray<string> | undefined
  readonly [extra: string]: unknown
}

/** A service's filter: why an original tool name is not offered, or undefined when it is. */
export type ServiceToolFilter = (tool: string) => string | undefined

const NO_FILTER: ServiceToolFilter = () => undefined
const serviceFilters = new WeakMap<object, ServiceToolFilter>()

/** A list field of a definition, the canonical name first, then the Gemini CLI's (a bad list counts as absent: the definition was checked when added). */
const listOf = (def: ToolFilterFields, name: string, alias: string): ReadonlyArray<string> | undefined => {
  const value = def[name] ?? def[alias]
  return globsProblem(value) === undefined ? (value as ReadonlyArray<string>) : undefined
}

/**
 * The tool filter of a definition: a tool is offered when `include_tools` (if given) matches it and
 * `exclude_tools` does not; exclusion wins, as in the Gemini CLI.
 */
export const serviceToolFilter = (def: ToolFilterFields): ServiceToolFilter => {
  let filter = serviceFilters.get(def)
  if (filter !== undefined) return filter
  const include = listOf(def, "include_tools", "includeTools")
  const exclude = listOf(def, "exclude_tools", "excludeTools")
  if (include === undefined && exclude === undefined) filter = NO_FILTER
  else {
    const included = include === undefined ? () => true : compile(include)
    const excluded = exclude === undefined ? () => false : compile(exclude)
    filter = (tool) =>
      excluded(tool) ? "the service's exclude_tools matches it" : included(tool) ? undefined : "the service's include_tools does not match it"
  }
  serviceFilters.set(def, filter)
  return filter
}

/** What a key may see and call: a test over callable names. */
export interface ToolGate {
  readonly allows: (callable: string) => boolean
}

const gates = new WeakMap<ReadonlyArray<string>, ToolGate>()

/** The gate of a key's `tools` list (compiled once per list). */
export const toolGate = (tools: ReadonlyArray<string>): ToolGate => {
  let gate = gates.get(tools)
  if (gate === undefined) gates.set(tools, (gate = { allows: compile(tools) }))
  return gate
}

/** The list of an agent key with no list under `--deny-by-default`: no tool. */
export const NO_TOOLS: ReadonlyArray<string> = Object.freeze([])
