module trapcost

go 1.21
