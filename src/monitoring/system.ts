/**
 * Figures of the machine and the process for system_resources (and monitoring): memory, CPU of
 * this process over a short interval, load average, and the disk that holds the services file.
 */
import { statfs } from "node:fs/promises"
import { cpus, freemem, loadavg, totalmem } from "node:os"
import { dirname } from "node:path"

const round = (n: number) => Math.round(n * 100) / 100

/** Percentage of one core this process used over `intervalMs` (measured now). */
export const processCpuPercent = async (intervalMs = 100): Promise<number> => {
  const start = process.cpuUsage()
  const t0 = performance.now()
  await new Promise((r) => setTimeout(r, intervalMs))
  const used = process.cpuUsage(start)
  const elapsedUs = (performance.now() - t0) * 1000
  return round(((used.user + used.system) / elapsedUs) * 100)
}

/** Size and use of the disk that holds `path`. */
export const diskOf = async (path: string) => {
  const fs = await statfs(dirname(path))
  const total = fs.blocks * fs.bsize
  const used = (fs.blocks - fs.bfree) * fs.bsize
  return { total, used, percentage: total === 0 ? 0 : round((used / total) * 100) }
}

/** The system_resources figures. */
export const systemResources = async (servicesFile: string, startedAt: number) => {
  const [cpu, disk] = await Promise.all([processCpuPercent(), diskOf(servicesFile)])
  const mem = process.memoryUsage()
  const total = totalmem()
  const used = total - freemem()
  const [l1, l5, l15] = loadavg()
  return {
    server_uptime_seconds: round((Date.now() - startedAt) / 1000),
    memory_total: total,
    memory_used: used,
    memory_percentage: round((used / total) * 100),
    process_rss: mem.rss,
    heap_used: mem.heapUsed,
    cpu_percentage: cpu,
    cpu_count: cpus().length,
    load_average: [round(l1 ?? 0), round(l5 ?? 0), round(l15 ?? 0)],
    disk_total: disk.total,
    disk_used: disk.used,
    disk_usage_percentage: disk.percentage
  }
}
