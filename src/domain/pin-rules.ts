/**
 * Pinned tool definitions (README, "Pinned tools"; docs/tool-pins.md): the rules, free of I/O. The
 * first time the store sees a service's tools it records a digest of each definition (name, title,
 * description, input and output schema, annotations); a later list that brings a different
 * definition, or a new tool, is judged by the service's pin mode: `strict` holds the tool until an
 * operator accepts it, `warn` tells and takes it, `off` records nothing. The digest is canonical
 * (keys sorted at every depth), so a reordered but equal schema is no change.
 */
import { createHash } from "node:crypto"
import { canonicalJson } from "./service-definition.js"

/** How a service's tools are pinned: its definition's `"pin"`, or `--pin-tools` for every service. */
export type PinMode = "strict" | "warn" | "off"
export const PIN_MODES = ["strict", "warn", "off"] as const satisfies ReadonlyArray<PinMode>

/** What a new tool of an already pinned service gets (`--pin-new-tools`): judged as a change (`hold`), or pinned at once (`accept`). */
export type NewToolRule = "hold" | "accept"
export const NEW_TOOL_RULES = ["hold", "accept"] as const satisfies ReadonlyArray<NewToolRule>

/** The store-wide pin settings. */
export interface PinSettings {
  readonly mode: PinMode
  readonly newTools: NewToolRule
}

/** Strict by default: a changed tool is held until an operator accepts it. */
export const DEFAULT_PIN_SETTINGS: PinSettings = { mode: "strict", newTools: "hold" }

/** The fields of a tool's definition that are pinned, in the order a diff lists them. */
export const PINNED_FIELDS = ["name", "title", "description", "inputSchema", "outputSchema", "annotations"] as const
export type PinnedField = (typeof PINNED_FIELDS)[number]

/** The longest text of one field kept with a pin, and shown in a diff (characters; longer is cut, marked `…`). */
export const MAX_SHOWN_CHARS = 2000
/** The most tools pinned per service: beyond it, pins of tools no longer listed are dropped first. */
export const MAX_PINNED_TOOLS = 1000
/** The most characters of diff text the changes of one list carry (they travel in a service's view): past it, a change names its fields only. */
export const MAX_DIFF_CHARS = 128 * 1024

/** A tool as pinned: the digest of its definition, a digest per field, and each field's text (bounded) for diffs. */
export interface PinnedTool {
  readonly hash: string
  readonly fields: Readonly<Partial<Record<PinnedField, string>>>
  readonly shown: Readonly<Partial<Record<PinnedField, string>>>
  readonly pinned_at: string
}

/** One field's change: its text before and after (null: absent), each cut at `MAX_SHOWN_CHARS`. */
export interface FieldChange {
  readonly before: string | null
  readonly after: string | null
}

/** A tool whose definition is not the pinned one (or a new tool): what changed, and the digest accepting it pins. */
export interface ToolChange {
  /** The tool's own name on its service. */
  readonly tool: string
  readonly change: "changed" | "new"
  /** Held (hidden, calls refused) until accepted; false: told and taken (`warn`, or a new tool under `accept`). */
  readonly held: boolean
  readonly changed_fields: ReadonlyArray<PinnedField>
  readonly diff: Readonly<Partial<Record<PinnedField, FieldChange>>>
  /** The digest of the definition as listed now: what an accept pins. */
  readonly hash: string
  readonly seen_at: string
}

/** The minimal shape of a listed tool this module reads. */
export interface PinnableTool {
  readonly name: string
}

const sha = (text: string): string => createHash("sha256").update(text).digest("hex")

const cut = (text: string): string => (text.length <= MAX_SHOWN_CHARS ? text : `${text.slice(0, MAX_SHOWN_CHARS)}…`)

/** A field's text: a string as it is, anything else as canonical JSON; undefined when absent. */
const fieldText = (value: unknown): string | undefined => (value === undefined ? undefined : typeof value === "string" ? value : canonicalJson(value))

/** The pin of a tool as listed now (`at`: ISO time). */
export const pinOf = (tool: PinnableTool, at: string): PinnedTool => {
  const whole: Record<string, unknown> = {}
  const fields: Partial<Record<PinnedField, string>> = {}
  const shown: Partial<Record<PinnedField, string>> = {}
  for (const f of PINNED_FIELDS) {
    const value = (tool as unknown as Record<string, unknown>)[f]
    if (value === undefined) continue
    whole[f] = value
    const text = fieldText(value)!
    fields[f] = sha(text).slice(0, 16)
    shown[f] = cut(text)
  }
  return { hash: sha(canonicalJson(whole)), fields, shown, pinned_at: at }
}

/** What changed between a pin and a tool's pin as listed now. */
export const changeOf = (tool: string, before: PinnedTool | undefined, after: PinnedTool, held: boolean): ToolChange => {
  const changed: Array<PinnedField> = []
  const diff: Partial<Record<PinnedField, FieldChange>> = {}
  for (const f of PINNED_FIELDS) {
    const a = before?.fields[f]
    const b = after.fields[f]
    if (a === b) continue
    changed.push(f)
    diff[f] = { before: before === undefined || a === undefined ? null : (before.shown[f] ?? null), after: b === undefined ? null : (after.shown[f] ?? null) }
  }
  return { tool, change: before === undefined ? "new" : "changed", held, changed_fields: changed, diff, hash: after.hash, seen_at: after.pinned_at }
}

/** What a list of a service's tools brings: the tools held, the changes not told before, the pins to write. */
export interface PinVerdict {
  readonly held: ReadonlyArray<ToolChange>
  /** Changes seen for the first time (held or taken): each a log line, an event and an alert. */
  readonly noticed: ReadonlyArray<ToolChange>
  /** Pins to add or replace (tool name -> pin); empty: nothing to write. */
  readonly write: Readonly<Record<string, PinnedTool>>
  /** Pins to drop (tools no longer listed, past `MAX_PINNED_TOOLS`). */
  readonly drop: ReadonlyArray<string>
}

const NOTHING: PinVerdict = { held: [], noticed: [], write: {}, drop: [] }

/**
 * Judges a list of a service's tools against its pins. `pins` undefined or empty: first sight (every
 * tool pinned, none held: what a service already added before an upgrade gets). `before`: the tools
 * held by the previous list, so that a change is told once, not on every list.
 */
export const judgeTools = (
  mode: PinMode,
  newTools: NewToolRule,
  pins: Readonly<Record<string, PinnedTool>> | undefined,
  tools: ReadonlyArray<PinnableTool>,
  before: ReadonlyArray<ToolChange>,
  at: string
): PinVerdict => {
  if (mode === "off") return NOTHING
  const write: Record<string, PinnedTool> = Object.create(null)
  const firstSight = pins === undefined || Object.keys(pins).length === 0
  const held: Array<ToolChange> = []
  const noticed: Array<ToolChange> = []
  const told = new Map(before.map((c) => [c.tool, c.hash]))
  for (const tool of tools) {
    if (typeof tool.name !== "string") continue
    const now = pinOf(tool, at)
    const pinned = firstSight || !Object.hasOwn(pins!, tool.name) ? undefined : pins![tool.name]
    if (pinned?.hash === now.hash) continue
    if (firstSight || (pinned === undefined && newTools === "accept")) {
      write[tool.name] = now
      continue
    }
    const hold = mode === "strict"
    const change = changeOf(tool.name, pinned, now, hold)
    if (hold) held.push(change)
    else write[tool.name] = now
    if (told.get(tool.name) !== now.hash) noticed.push(change)
  }
  // Bounded: past the cap, pins of tools no longer listed go first; then the newest are not kept.
  const count = (pins === undefined ? 0 : Object.keys(pins).filter((n) => !Object.hasOwn(write, n)).length) + Object.keys(write).length
  const drop: Array<string> = []
  if (count > MAX_PINNED_TOOLS && pins !== undefined) {
    const listed = new Set(tools.map((t) => t.name))
    for (const name of Object.keys(pins)) if (!listed.has(name) && count - drop.length > MAX_PINNED_TOOLS) drop.push(name)
  }
  let room = MAX_PINNED_TOOLS - (count - drop.length - Object.keys(write).length)
  for (const name of Object.keys(write)) {
    if (room > 0) room -= 1
    else delete write[name]
  }
  return { held: bounded(held), noticed: bounded(noticed), write, drop }
}

/** Changes whose diffs together stay within `MAX_DIFF_CHARS`: past it, a change keeps its fields, not their texts. */
const bounded = (changes: ReadonlyArray<ToolChange>): ReadonlyArray<ToolChange> => {
  let budget = MAX_DIFF_CHARS
  return changes.map((c) => {
    const size = Object.values(c.diff).reduce((n, d) => n + (d?.before?.length ?? 0) + (d?.after?.length ?? 0), 0)
    if (size <= budget) {
      budget -= size
      return c
    }
    budget = 0
    return { ...c, diff: {} }
  })
}
