/**
 * Where the pinned tool definitions live (docs/tool-pins.md): the interface, and the file beside
 * the services file (`mcp.json` -> `mcp.tool-pins.json`: one JSON document, replaced atomically,
 * the writes of a burst coalesced). The cluster's Redis holds them in replica mode
 * (src/config/redis-pins.ts). A symlink at the file's path is never followed: the pins are then
 * kept in memory only, and the refusal is logged.
 */
import { basename, dirname, extname, join } from "node:path"
import { CoalescedWrites, readOwnJson, writeAtomically } from "./atomic-write.js"
import { PINNED_FIELDS, type PinnedTool } from "../domain/pin-rules.js"
import { log } from "../logging/log.js"

/** The pins of one service: tool name -> pin. */
export type ServicePins = Readonly<Record<string, PinnedTool>>

/** Where pins are kept; a service is named by its `serviceField` (`store/<name>`, `agent/<id>/<name>`). */
export interface ToolPinsBackend {
  /** The pins of a service (undefined: none recorded yet, its first sight). */
  read(field: string): Promise<ServicePins | undefined>
  /** Adds or replaces pins of a service, and drops `drop`; on disk (or in Redis) when it resolves. */
  write(field: string, pins: ServicePins, drop?: ReadonlyArray<string>): Promise<void>
  /** Forgets a removed service's pins. */
  forget(field: string): Promise<void>
  close(): Promise<void>
}

/** The pins file of a services file: `mcp.json` -> `mcp.tool-pins.json`. */
export const toolPinsFileFor = (servicesFile: string): string => {
  const name = basename(servicesFile)
  const ext = extname(name)
  return join(dirname(servicesFile), `${name.slice(0, name.length - ext.length)}.tool-pins.json`)
}

/** Whether a value read from a file or Redis has the shape of a pin (a file edited by hand is read, not trusted). */
export const isPin = (value: unknown): value is PinnedTool => {
  if (typeof value !== "object" || value === null) return false
  const p = value as Record<string, unknown>
  const record = (v: unknown) => typeof v === "object" && v !== null && Object.entries(v).every(([k, s]) => (PINNED_FIELDS as ReadonlyArray<string>).includes(k) && typeof s === "string")
  return typeof p["hash"] === "string" && typeof p["pinned_at"] === "string" && record(p["fields"]) && record(p["shown"])
}

/** The pins of one store in a file beside its services file, every pin in memory. */
export class ToolPinsFile implements ToolPinsBackend {
  private readonly services = new Map<string, Record<string, PinnedTool>>()
  /** A symlink stood at the file's path: nothing is read from or written to it. */
  private refused = false
  private readonly writes = new CoalescedWrites(() => this.writeFile())

  private constructor(readonly path: string) {}

  /** Opens the pins of `servicesFile` (an absent file: no pins yet). */
  static async open(servicesFile: string): Promise<ToolPinsFile> {
    const file = new ToolPinsFile(toolPinsFileFor(servicesFile))
    await file.load()
    return file
  }

  private async load(): Promise<void> {
    const doc = await readOwnJson(
      this.path,
      "Tool pins",
      { refused: "tool_pins_file_refused", unreadable: "tool_pins_file_unreadable" },
      "every service's tools are pinned again at their next list"
    )
    if (doc === "link") this.refused = true
    if (doc === undefined || doc === "link") return
    const services = (doc as { services?: unknown } | null)?.services
    if (typeof services !== "object" || services === null) return
    for (const [field, pins] of Object.entries(services)) {
      if (typeof pins !== "object" || pins === null) continue
      const kept: Record<string, PinnedTool> = Object.create(null)
      for (const [tool, pin] of Object.entries(pins)) if (isPin(pin)) kept[tool] = pin
      this.services.set(field, kept)
    }
  }

  /** Writes the file after the write under way, if any (the changes made meanwhile, coalesced). */
  private persist(): Promise<void> {
    return this.writes.persist()
  }

  private async writeFile(): Promise<void> {
    if (this.refused) return
    const text = JSON.stringify({ version: 1, services: Object.fromEntries(this.services) })
    try {
      await writeAtomically(this.path, text)
    } catch (e) {
      log.error(`tool pins file ${this.path} could not be written: ${e instanceof Error ? e.message : String(e)}`, { event: "tool_pins_write_failed", file: this.path })
      throw e
    }
  }

  read(field: string): Promise<ServicePins | undefined> {
    return Promise.resolve(this.services.get(field))
  }

  write(field: string, pins: ServicePins, drop: ReadonlyArray<string> = []): Promise<void> {
    const kept = this.services.get(field) ?? Object.create(null)
    for (const name of drop) delete kept[name]
    Object.assign(kept, pins)
    this.services.set(field, kept)
    return this.persist()
  }

  forget(field: string): Promise<void> {
    if (!this.services.delete(field)) return Promise.resolve()
    return this.persist()
  }

  close(): Promise<void> {
    return this.writes.close()
  }
}
