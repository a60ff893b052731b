use super::*;

#[test]
fn cpu_lines_give_each_cpu_and_skip_the_total() {
    let text = "cpu  10 20 30 40 50 60 70 80 90 100\n\
                cpu0 1 2 3 4 5 6 7 8 9 10\n\
                cpu1 11 12 13 14\n\
                intr 5 6\nctxt 99\n";
    let got = cpu_stat(text);
    assert_eq!(got.len(), 2);
    assert_eq!(
        got[0],
        (
            "cpu0",
            CpuTicks {
                user: 1,
                nice: 2,
                system: 3,
                idle: 4,
                wait: 5,
                interrupt: 6,
                softirq: 7,
                steal: 8
            }
        )
    );
    // An old kernel's four columns: the rest are 0.
    assert_eq!(got[1].1.idle, 14);
    assert_eq!(got[1].1.steal, 0);
}

#[test]
fn loadavg_and_meminfo_and_vmstat() {
    assert_eq!(
        loadavg("0.52 0.41 0.30 2/345 6789\n"),
        Some([0.52, 0.41, 0.30])
    );
    assert_eq!(loadavg("garbage"), None);
    let text = "MemTotal:       16000000 kB\nMemFree:         1000000 kB\nMemAvailable:    8000000 kB\n\
                Buffers:          500000 kB\nCached:          4000000 kB\nSwapCached:            0 kB\n\
                SwapTotal:       2000000 kB\nSwapFree:        1500000 kB\nSReclaimable:     300000 kB\n\
                SUnreclaim:       100000 kB\nHugePages_Total:       0\n";
    let m = meminfo(text).unwrap();
    assert_eq!(m.total, 16_000_000 * 1024);
    assert_eq!(m.cached, 4_000_000 * 1024);
    assert_eq!(
        m.used(),
        (16_000_000 - 1_000_000 - 500_000 - 4_000_000 - 300_000) * 1024
    );
    assert_eq!(m.swap_total - m.swap_free, 500_000 * 1024);
    // A key without a unit is a count; `SwapCached` is not `Cached`.
    assert_eq!(meminfo_value(text, "HugePages_Total"), Some(0));
    assert_eq!(meminfo("Nothing: 1 kB\n"), None);
    let vm = "pgfault 1234\npgmajfault 56\npswpin 7\npswpout 8\n";
    assert_eq!(vmstat_value(vm, "pgfault"), Some(1234));
    assert_eq!(vmstat_value(vm, "pswpout"), Some(8));
    assert_eq!(vmstat_value(vm, "pgfaul"), None);
}

#[test]
fn pressure_totals_of_some_and_full() {
    let t = "some avg10=0.00 avg60=0.12 avg300=0.05 total=123456\n\
             full avg10=0.00 avg60=0.00 avg300=0.00 total=789\n";
    assert_eq!(pressure(t), (Some(123_456), Some(789)));
    assert_eq!(
        pressure("some avg10=1.00 avg60=0.00 avg300=0.00 total=5\n"),
        (Some(5), None)
    );
}

#[test]
fn diskstats_keep_whole_disks_in_bytes_and_skip_partitions_loops_and_idle_devices() {
    let text = "   7       0 loop0 10 0 20 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n\
                 254       0 vda 108950 12852 5483458 132761 38466 101428 27194456 209339 0 36112 347521 15162 54 3155232 5049 4096 370\n\
                 254       1 vda1 100 0 200 0 0 0 0 0 0 0 0\n\
                 259       0 nvme0n1 5 0 8 1 6 0 16 2 0 3 4\n\
                 259       1 nvme0n1p1 5 0 8 1 6 0 16 2 0 3 4\n\
                 253       0 dm-0 1 0 8 1 1 0 8 1 0 2 2\n\
                 253       1 zram0 0 0 0 0 0 0 0 0 0 0 0\n\
                   8      16 sdb 0 0 0 0 0 0 0 0 0 0 0\n";
    let got = diskstats(text);
    let names: Vec<&str> = got.iter().map(|g| g.0).collect();
    assert_eq!(names, ["vda", "nvme0n1", "dm-0"]);
    assert_eq!(
        got[0].1,
        DiskStats {
            reads: 108_950,
            read_bytes: 5_483_458 * 512,
            read_ms: 132_761,
            writes: 38_466,
            write_bytes: 27_194_456 * 512,
            write_ms: 209_339,
            io_ms: 36_112,
        }
    );
    for disk in [
        "sda", "vdb", "xvda", "nvme1n1", "mmcblk0", "md0", "dm-3", "sr0",
    ] {
        assert!(reported_disk(disk), "{disk}");
    }
    for part in [
        "sda1",
        "vdb12",
        "xvda1",
        "nvme1n1p3",
        "mmcblk0p1",
        "loop7",
        "ram0",
        "zram1",
    ] {
        assert!(!reported_disk(part), "{part}");
    }
}

#[test]
fn net_dev_gives_each_interface_both_ways() {
    let text = "Inter-|   Receive                                                |  Transmit\n \
                face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
                lo: 1000 10 0 0 0 0 0 0 1000 10 0 0 0 0 0 0\n  \
                eth0: 5000 50 1 2 0 0 0 3 7000 70 4 5 0 0 0 0\n";
    let got = net_dev(text);
    assert_eq!(got.len(), 2);
    assert_eq!(got[1].0, "eth0");
    assert_eq!(got[1].1.receive, [5000, 50, 1, 2]);
    assert_eq!(got[1].1.transmit, [7000, 70, 4, 5]);
}

#[test]
fn tcp_sockets_are_counted_by_state() {
    let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   \
                0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  0 0 1 1\n   \
                1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000  0 0 2 1\n   \
                2: 0100007F:C350 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  0 0 3 1\n   \
                3: 0100007F:C351 0100007F:1F90 06 00000000:00000000 00:00000000 00000000  0 0 0 1\n   \
                4: bad\n";
    let mut counts = [0; 12];
    tcp_states(text, &mut counts);
    tcp_states(text, &mut counts);
    assert_eq!(counts[0], 4, "ESTABLISHED");
    assert_eq!(counts[9], 2, "LISTEN");
    assert_eq!(counts[5], 2, "TIME_WAIT");
    assert_eq!(counts.iter().sum::<u64>(), 8);
}

#[test]
fn proc_stat_reads_past_a_name_with_spaces_and_parentheses() {
    let text = "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 1000 0 0 0 150 25 0 0 20 0 3 0 987654 123456789 2048 18446744073709551615\n";
    let s = proc_stat(text).unwrap();
    assert_eq!(s.comm, "my (odd) name");
    assert_eq!(s.cpu_ticks, 175);
    assert_eq!(s.start_ticks, 987_654);
    assert_eq!(s.rss_pages, 2048);
    assert_eq!(proc_stat("4242 (cut"), None);
    assert_eq!(proc_stat("4242 (short) S 1 2 3\n"), None);
}

#[test]
fn mounts_are_unescaped_and_pseudo_filesystems_are_not_reported() {
    let text = "/dev/vda1 / ext4 rw,relatime 0 0\n\
                proc /proc proc rw 0 0\n\
                tmpfs /run tmpfs rw 0 0\n\
                /dev/vdb /mnt/my\\040disk xfs rw 0 0\n\
                cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n";
    let m = mounts(text);
    assert_eq!(
        m[3],
        ("/dev/vdb".to_string(), "/mnt/my disk".to_string(), "xfs")
    );
    let reported: Vec<&str> = m
        .iter()
        .filter(|(_, p, k)| reported_mount(p, k))
        .map(|(_, p, _)| p.as_str())
        .collect();
    assert_eq!(reported, ["/", "/run", "/mnt/my disk"]);
    assert!(!reported_mount("/dev/shm", "tmpfs"));
    assert!(!reported_mount("/var/lib/docker/overlay2/x/merged", "ext4"));
    assert!(reported_mount("/device", "ext4"));
}

#[test]
fn cgroup_files() {
    assert_eq!(
        cgroup_cpu_usec("usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n"),
        Some(1_500_000)
    );
    assert_eq!(cgroup_cpu_usec("user_usec 1\n"), None);
    assert_eq!(
        cgroup_io("8:0 rbytes=4096 wbytes=8192 rios=1 wios=2 dbytes=0 dios=0\n253:0 rbytes=1 wbytes=2 rios=1 wios=1\n"),
        (4097, 8194)
    );
    assert_eq!(cgroup_io(""), (0, 0));
}
