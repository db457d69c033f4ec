/**
 * The pinned tool definitions shared by the replicas of a cluster (docs/tool-pins.md,
 * docs/replicas-data.md): one Redis hash per service, `pins:<service field>`, one field per tool
 * (its pin as JSON). The replica that runs a service judges its lists against it; an accept made on
 * any replica writes it, so the owner finds the accepted pin at its next list. Every command has
 * the connection's time-out (src/redis/connection.ts); a failure is thrown to the caller, which
 * refuses the list (fail closed) or the accept.
 */
import type { ClusterData } from "../records/redis-records.js"
import { clusterKey } from "../redis/key-names.js"
import { isPin, type ServicePins, type ToolPinsBackend } from "./pins-file.js"
import type { PinnedTool } from "../domain/pin-rules.js"

export class RedisToolPins implements ToolPinsBackend {
  constructor(private readonly data: ClusterData) {}

  private key(field: string): string {
    return clusterKey(this.data.cluster, "pins", field)
  }

  async read(field: string): Promise<ServicePins | undefined> {
    const stored = await this.data.client.hGetAll(this.key(field))
    const entries = Object.entries(stored)
    if (entries.length === 0) return undefined
    const pins: Record<string, PinnedTool> = Object.create(null)
    for (const [tool, text] of entries) {
      try {
        const pin: unknown = JSON.parse(text)
        if (isPin(pin)) pins[tool] = pin
      } catch {
        // a value that is not a pin counts as no pin: the tool is new
      }
    }
    return pins
  }

  async write(field: string, pins: ServicePins, drop: ReadonlyArray<string> = []): Promise<void> {
    const key = this.key(field)
    const multi = this.data.client.multi()
    if (drop.length > 0) multi.hDel(key, [...drop])
    const values = Object.entries(pins).map(([tool, pin]) => [tool, JSON.stringify(pin)] as [string, string])
    if (values.length > 0) multi.hSet(key, values)
    if (drop.length > 0 || values.length > 0) await multi.exec()
  }

  async forget(field: string): Promise<void> {
    await this.data.client.del(this.key(field))
  }

  close(): Promise<void> {
    return Promise.resolve()
  }
}
