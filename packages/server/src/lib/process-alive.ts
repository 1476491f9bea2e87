import { readFileSync } from 'node:fs';

/**
 * Whether a process of this machine is running (the owner of a lock or of a
 * file being written). Pids are reused, rarely: a dead owner's pid taken by
 * another process only delays what waits for it.
 */
export function isProcessAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it runs, as another user.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * When process `pid` started, in clock ticks since boot (Linux's
 * /proc/<pid>/stat, field 22); null where that cannot be read. With the pid
 * it names one process: a pid taken again later (a container's restarted
 * gateway is pid 1 again, a machine's reboot hands pids out anew) comes with
 * another start time.
 */
export function processStartTime(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may hold spaces and parentheses: count fields after its last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return fields[19] ?? null;
  } catch {
    return null;
  }
}
