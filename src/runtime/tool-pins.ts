/**
 * The store's pinned tool definitions at work (docs/tool-pins.md): each list of a service's tools
 * (at connect and at every refresh, src/runtime/adapter.ts) is judged against the service's pins
 * (src/domain/pin-rules.ts) before the service actor takes it, so the held tools are in the actor's
 * snapshot and every face (REST lists, get_service_info, the MCP endpoints, calls) reads the same
 * answer from it. An accept writes the held definition's pin, then the service lists its tools
 * again (src/runtime/commands.ts, `acceptToolChanges`). Each change found and each accept is a log
 * line here; the events and alerts come from the snapshots (src/monitoring/monitor.ts).
 */
import { createHash } from "node:crypto"
import { serviceField } from "../domain/replicas.js"
import { canonicalJson, scopeLabel, type Scope, type ServiceDefinition } from "../domain/service-definition.js"
import { DEFAULT_PIN_SETTINGS, PIN_MODES, judgeTools, pinOf, type PinMode, type PinSettings, type PinnableTool, type PinnedTool, type ToolChange } from "../domain/pin-rules.js"
import type { ToolPinsBackend } from "../config/pins-file.js"
import { log } from "../logging/log.js"

/** What a list brings once judged: the tools held, and the changes seen for the first time. */
export interface PinOutcome {
  readonly held: ReadonlyArray<ToolChange>
  readonly noticed: ReadonlyArray<ToolChange>
}

/**
 * The pin under which a service's pins keep the digest of the definition they were taken with (a
 * name no listed tool has: the connection leaves out tools whose names hold a control character). An operator's edit of the connection (update_service, the
 * services file) is a new server as far as pins go: its tools are pinned afresh, nothing held.
 */
export const DEFINITION_PIN = "\u0000definition"

/** The digest of what a definition connects to: everything but `disabled` and `pin`. */
const definitionDigest = (definition: ServiceDefinition): string => {
  const { disabled: _d, pin: _p, ...rest } = definition as Record<string, unknown>
  return createHash("sha256").update(canonicalJson(rest)).digest("hex")
}

const where = (scope: Scope, name: string): string => (scope.kind === "store" ? `store service '${name}'` : `agent '${scope.agentId}' service '${name}'`)

/** The pin mode of a definition: its own `"pin"`, else the store's default. */
export const pinModeOf = (definition: ServiceDefinition, settings: PinSettings): PinMode => {
  const own = (definition as Record<string, unknown>)["pin"]
  return typeof own === "string" && (PIN_MODES as ReadonlyArray<string>).includes(own) ? (own as PinMode) : settings.mode
}

export class ToolPins {
  constructor(
    private readonly backend: ToolPinsBackend,
    readonly settings: PinSettings = DEFAULT_PIN_SETTINGS
  ) {}

  /**
   * Judges a list of a service's tools: new pins written (first sight, `warn`, new tools under
   * `accept`) before it resolves; a change seen for the first time is a log line. Fails when the
   * pins cannot be read or written (the list is then refused: never taken unjudged).
   */
  async check(scope: Scope, name: string, definition: ServiceDefinition, tools: ReadonlyArray<PinnableTool>, before: ReadonlyArray<ToolChange>): Promise<PinOutcome> {
    const mode = pinModeOf(definition, this.settings)
    if (mode === "off") return { held: [], noticed: [] }
    const field = serviceField(scope, name)
    const stored = await this.backend.read(field)
    const at = new Date().toISOString()
    const digest = definitionDigest(definition)
    // Pins taken with another definition (or none): first sight, the old ones dropped.
    const same = stored !== undefined && Object.hasOwn(stored, DEFINITION_PIN) && stored[DEFINITION_PIN]!.hash === digest
    const pins = same ? Object.fromEntries(Object.entries(stored).filter(([tool]) => tool !== DEFINITION_PIN)) : undefined
    const verdict = judgeTools(mode, this.settings.newTools, pins, tools, same ? before : [], at)
    const written = Object.keys(verdict.write).length
    const firstSight = !same
    if (firstSight) {
      const drop = stored === undefined ? [] : Object.keys(stored).filter((tool) => !Object.hasOwn(verdict.write, tool))
      await this.backend.write(field, { ...verdict.write, [DEFINITION_PIN]: { hash: digest, fields: {}, shown: {}, pinned_at: at } }, drop)
    } else if (written > 0 || verdict.drop.length > 0) await this.backend.write(field, verdict.write, verdict.drop)
    if (firstSight) log.info(`pinned ${written} tool definition(s) of ${where(scope, name)} (first sight${stored === undefined ? "" : ": its definition changed"})`, { event: "tools_pinned", scope: scopeLabel(scope), service: name, count: written })
    for (const c of verdict.noticed) {
      const what = c.change === "new" ? "a new tool" : `its definition changed (${c.changed_fields.join(", ")})`
      log.warn(`tool '${c.tool}' of ${where(scope, name)}: ${what}; ${c.held ? "held until accepted (accept_tool_changes)" : `taken (pin mode ${mode})`}`, {
        event: c.held ? "tool_held" : "tool_changed",
        scope: scopeLabel(scope),
        service: name,
        tool: c.tool,
        change: c.change,
        fields: c.changed_fields.join(",")
      })
    }
    return { held: verdict.held, noticed: verdict.noticed }
  }

  /**
   * Pins the definitions of held tools as they were shown (`changes`), each matched to the listed
   * tool with that digest; a tool listed otherwise since is not pinned (it stays held, changed
   * again). Resolves with the tools pinned, once they are written.
   */
  async accept(scope: Scope, name: string, tools: ReadonlyArray<PinnableTool>, changes: ReadonlyArray<ToolChange>, by: string): Promise<ReadonlyArray<string>> {
    const at = new Date().toISOString()
    const write: Record<string, PinnedTool> = Object.create(null)
    for (const c of changes) {
      const tool = tools.find((t) => t.name === c.tool)
      if (tool === undefined) continue
      const pin = pinOf(tool, at)
      if (pin.hash === c.hash) write[c.tool] = pin
    }
    const accepted = Object.keys(write)
    if (accepted.length === 0) return accepted
    await this.backend.write(serviceField(scope, name), write)
    log.info(`accepted the changed definition(s) of ${accepted.map((t) => `'${t}'`).join(", ")} of ${where(scope, name)} (by ${by})`, {
      event: "tool_changes_accepted",
      scope: scopeLabel(scope),
      service: name,
      tools: accepted.join(","),
      by
    })
    return accepted
  }

  /** Forgets a removed service's pins (a failure is logged: the pins stay, a re-added service is judged by them). */
  async forget(scope: Scope, name: string): Promise<void> {
    await this.backend.forget(serviceField(scope, name)).catch((e: unknown) =>
      log.warn(`the tool pins of ${where(scope, name)} could not be forgotten: ${e instanceof Error ? e.message : String(e)}`, { event: "tool_pins_forget_failed", scope: scopeLabel(scope), service: name })
    )
  }
}
